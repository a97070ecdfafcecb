"""One configuration's engine, started and stopped like the embedded engines (its own process group, /health, a
state file, its log kept), for any model path and exactly the point's flags.

The command line is the engine's entry point, the model, what servelab needs to reach and read the server (host,
port, the name it serves; llama.cpp's ``--metrics`` and ``-lv 4``, which logs its buffers), then the point's own
flags as typed. Only with the embedded model (no ``--model``) does it start from the embedded engine's settings
(vLLM: ``--max-model-len 8192 --dtype bfloat16`` and a 2 GiB KV pool), each a flag the point may give itself, and
each written in the command line stored with the point.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from servelab.core.errors import EngineError
from servelab.engines.embedded import (
    MODEL_NAME,
    EmbeddedEngine,
    EngineSettings,
    Progress,
    _offline_env,
    healthy,
    log_last_line,
)
from servelab.engines.llamacpp_build import binary_path, usable
from servelab.sweep.grid import Point

ENGINES = ("vllm", "llamacpp", "sglang")
EMBEDDED_VLLM_ARGS = ("--max-model-len", "8192", "--dtype", "bfloat16")  # the embedded engine's own settings
EMBEDDED_VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2"}
LLAMACPP_NEEDS = ("--metrics", "-lv", "4")  # its /metrics for the bench, its buffer sizes in the log


class StartFailed(EngineError):
    """The engine exited or did not answer /health in time; what the classifier needs."""

    def __init__(self, message: str, exit_code: int | None, timed_out: bool) -> None:
        super().__init__(message)
        self.returncode, self.timed_out = exit_code, timed_out


@dataclass(frozen=True, slots=True)
class Launch:
    """What starts one point: the engine, the model it serves and the words and environment of its command."""

    engine: str
    model: str  # a path (or a name the engine resolves itself)
    served_name: str
    args: tuple[str, ...]  # servelab's base words and the point's flags, after the model and address
    env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable

    def command(self, host: str, port: int) -> list[str]:
        if self.engine == "llamacpp":
            head = [str(binary_path()), "-m", self.model, "--alias", self.served_name]
            return [*head, "--host", host, "--port", str(port), *self.args]
        if self.engine == "sglang":
            head = [self.python, "-m", "sglang.launch_server", "--model-path", self.model]
            return [*head, "--served-model-name", self.served_name, "--host", host, "--port", str(port), *self.args]
        head = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model]
        return [*head, "--served-model-name", self.served_name, "--host", host, "--port", str(port), *self.args]

    def command_line(self, host: str, port: int) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join([*env, shlex.join(self.command(host, port))])


def launch_for(engine: str, point: Point, model: str | None, embedded_model: Path | None) -> Launch:
    """The launch of ``point``: its flags after servelab's base words (and the embedded settings it does not set
    itself, when the model is the embedded one)."""
    args, env = list(point.args), point.env_dict()
    if engine == "llamacpp":
        args = [*LLAMACPP_NEEDS, *args]
    if model is None and engine == "vllm":
        args = [*_unset(EMBEDDED_VLLM_ARGS, args), *args]
        env = {**{k: v for k, v in EMBEDDED_VLLM_ENV.items() if k not in env}, **env}
    served = MODEL_NAME if model is None else Path(model).name or model
    path = model if model is not None else str(embedded_model)
    return Launch(engine, path, served, tuple(args), env)


def _unset(defaults: tuple[str, ...], given: list[str]) -> list[str]:
    """The (flag, value) pairs of ``defaults`` whose flag ``given`` does not hold (as ``--flag`` or ``--flag=``)."""
    out = []
    for flag, value in zip(defaults[::2], defaults[1::2], strict=True):
        if not any(word == flag or word.startswith(flag + "=") for word in given):
            out += [flag, value]
    return out


class PointEngine(EmbeddedEngine):
    """The embedded engines' start, wait and stop for one point's launch; its log in its own folder."""

    def __init__(self, launch: Launch, settings: EngineSettings) -> None:
        super().__init__(settings)
        self.launch = launch
        self.label = {"vllm": "vLLM", "llamacpp": "llama-server", "sglang": "SGLang"}[launch.engine]

    def ensure_model(self, progress: Progress | None = None) -> Path:
        return Path(self.launch.model)

    def _check_installed(self) -> None:
        if self.launch.engine == "llamacpp":
            if not usable(binary_path()):
                raise EngineError(f"no runnable llama-server at {binary_path()}", hint="`make llama-server` builds it")
            return
        module = "sglang" if self.launch.engine == "sglang" else "vllm"
        probe = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('{module}') else 3)"
        if subprocess.run([self.launch.python, "-c", probe], capture_output=True).returncode != 0:
            raise EngineError(f"{module} is not installed for {self.launch.python}")

    def _command(self) -> list[str]:
        return self.launch.command(self.settings.host, self.settings.port)

    def _env(self) -> dict[str, str]:
        return {**_offline_env(), **self.launch.env}

    def _wait_healthy(self, proc: subprocess.Popen[bytes], progress: Progress | None) -> None:
        s = self.settings
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            if proc.poll() is not None:
                raise StartFailed(f"{self.label} exited with code {proc.returncode} while starting", proc.returncode,
                                  timed_out=False)  # fmt: skip
            if healthy(s.url, timeout=1.0):
                return
            if elapsed > s.start_timeout_s:
                raise StartFailed(f"{self.label} did not answer /health within {s.start_timeout_s:g} s", None,
                                  timed_out=True)  # fmt: skip
            if progress:
                progress(f"starting {self.label}: {log_last_line(s.log_path)}", elapsed)
            time.sleep(1.0)


def point_settings(home: Path, instance: str, port: int, start_timeout_s: float) -> EngineSettings:
    return replace(EngineSettings(home=home, instance=instance, port=port, start_timeout_s=start_timeout_s),
                   log_name="engine.log")  # fmt: skip
