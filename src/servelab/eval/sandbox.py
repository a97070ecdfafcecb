"""Run model-written code without Docker: a fresh temporary copy, a non-root user, rlimits, a process-group
kill, and bubblewrap for no network and a read-only view of the host.

``bwrap`` mode: every namespace unshared (network included: only an unconfigured loopback inside), one of the
views of :mod:`servelab.eval.mounts` ("agent": the system folders with every Python package folder, servelab
and the hidden paths masked; "graded": the interpreter and nothing else), a private /tmp and /dev/shm of a
fixed size, a private /dev and /proc, the work folder bound at /tmp/sandbox (read-write, or read-only for
grading), and bwrap as the pid namespace's init: killing it ends every process inside. The interpreter is the
system's (as root) or the base of servelab's own, never a venv (a venv holds servelab and its tasks).
``none`` mode (only with --unsafe): the same user, rlimits and kill, no namespaces.

What the code prints is read as it comes and kept up to a limit, so a program that writes without end costs
the host no memory.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from servelab.core.errors import UsageError
from servelab.eval.mounts import agent_view, graded_view, interpreter

NOBODY = 65534
PYLIB = "/tmp/pylib"  # inside: a read-only copy of pytest and its dependencies
INSIDE = "/tmp/sandbox"  # inside the private /tmp: the host root is read-only
SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 30.0
    memory_mb: int = 1024  # address space
    processes: int = 64  # for the sandbox user, system-wide
    file_mb: int = 64  # largest file written
    output_bytes: int = 64_000  # kept of stdout / stderr each
    tmp_mb: int = 256  # the private /tmp and /dev/shm, each


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    timed_out: bool
    sandbox: str  # "bwrap" or "none"
    raw_stdout: bytes = b""
    report: bytes = b""  # what the code wrote to the report pipe (its fd number is in SERVELAB_REPORT_FD)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@functools.cache
def bwrap_works() -> bool:
    """bwrap is installed and can create its namespaces here (as the sandbox user)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    try:
        done = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
            capture_output=True,
            timeout=20,
            preexec_fn=_drop_user if os.geteuid() == 0 else None,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def sandbox_kind(unsafe: bool = False) -> str:
    """ "bwrap" when it works; "none" only when the caller accepted that with ``unsafe``."""
    if bwrap_works():
        return "bwrap"
    if unsafe:
        return "none"
    raise UsageError(
        "no working sandbox: bubblewrap (bwrap) is missing or cannot create namespaces here",
        hint="install it (apt-get install bubblewrap), or pass --unsafe to run model-written code without one",
    )


def _drop_user() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _limit(limits: Limits) -> None:
    """In the child before exec: rlimits, then the unprivileged user."""
    mem = limits.memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    cpu = int(limits.timeout_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    size = limits.file_mb * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.geteuid() == 0:
        _drop_user()


def fresh_copy(source: Path | None = None, files: dict[str, str] | None = None) -> Path:
    """A new temporary work folder (a copy of ``source``, a folder servelab trusts, plus ``files``) the sandbox
    user may write."""
    work = Path(tempfile.mkdtemp(prefix="servelab-sandbox-"))
    if source is not None:
        shutil.copytree(source, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    for name, text in (files or {}).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    give_to_sandbox(work)
    return work


def give_to_sandbox(root: Path) -> None:
    """Everything under ``root`` (a folder servelab made) belongs to the sandbox user."""
    if os.geteuid() == 0:
        for path in [root, *root.rglob("*")]:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def python() -> str:
    """The interpreter the sandbox user can run: the system one when we drop from root (our own may live
    under /root, which that user cannot enter), else the base interpreter of ours (never a venv: a venv holds
    servelab and its bundled tasks)."""
    if os.geteuid() == 0:
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if os.path.exists(candidate):
                return candidate
    return str(getattr(sys, "_base_executable", None) or sys.executable)


@functools.cache
def pytest_lib() -> Path:
    """The grading runtime (pytest and its pure-Python dependencies, copied where any user can read them):
    nothing of servelab's, nothing of a task's. Removed when this process exits."""
    from servelab.eval.runtime import build_runtime

    lib = Path(tempfile.mkdtemp(prefix="servelab-pylib-"))
    atexit.register(shutil.rmtree, lib, True)
    build_runtime(lib)
    return lib


def seen_as(work: Path, kind: str) -> str:
    """Where the code inside the sandbox finds ``work``: /tmp/sandbox under bwrap, the folder itself otherwise."""
    return INSIDE if kind == "bwrap" else str(work)


def library(kind: str) -> str:
    """Where the code inside the sandbox finds the grading runtime (pytest and its dependencies)."""
    return PYLIB if kind == "bwrap" else str(pytest_lib())


def _bwrap_argv(argv: Sequence[str], work: Path, limits: Limits, read_only: bool, env: Mapping[str, str],
                view: str) -> list[str]:  # fmt: skip
    """``view``: "agent" (the system, package folders masked, the runtime at /tmp/pylib), "graded" (the
    interpreter only) or "graded+runtime" (and the runtime): see :mod:`servelab.eval.mounts`."""
    tmp = str(limits.tmp_mb * 2**20)
    setenv = [x for k, v in env.items() for x in ("--setenv", k, v)]
    system = agent_view(python()) if view == "agent" else graded_view(python())
    runtime = ["--ro-bind", str(pytest_lib()), PYLIB] if view in ("agent", "graded+runtime") else []
    return [
        "bwrap",
        *system,
        "--dev", "/dev",
        "--size", tmp, "--tmpfs", "/dev/shm",
        "--proc", "/proc",
        "--size", tmp, "--tmpfs", "/tmp",
        "--ro-bind" if read_only else "--bind", str(work), INSIDE,
        *runtime,
        "--chdir", INSIDE,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *setenv,
        *argv,
    ]  # fmt: skip


class _Drain(threading.Thread):
    """Reads a pipe to its end, keeping the first ``cap`` bytes and dropping the rest."""

    def __init__(self, fd: int, cap: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.cap, self.data = fd, cap, bytearray()

    def run(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self.fd, 65536):
                if len(self.data) < self.cap:
                    self.data += chunk[: self.cap - len(self.data)]
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass
class Running:
    """A sandboxed process started by :func:`start`; :func:`finish` waits for it and collects what it wrote."""

    proc: subprocess.Popen[bytes]
    limits: Limits
    kind: str
    drains: list[_Drain]
    report: bool
    started: float


def run(argv: Sequence[str], work: Path, *, kind: str, limits: Limits | None = None, stdin: bytes | None = None,
        read_only: bool = False, env: Mapping[str, str] | None = None, report_bytes: int = 0, view: str = "agent",
        pass_fds: Sequence[int] = ()) -> SandboxResult:  # fmt: skip
    """Run ``argv`` in ``work`` (seen as /tmp/sandbox under bwrap); never raises for what the code does.
    An ``argv[0]`` of "python" is the interpreter the sandbox user can run (with pytest importable in the
    "agent" and "graded+runtime" views). ``report_bytes``: open a report pipe for the code
    (SERVELAB_REPORT_FD), kept up to that many bytes. ``pass_fds``: more pipes the code keeps open."""
    return finish(start(argv, work, kind=kind, limits=limits, stdin=stdin, read_only=read_only, env=env,
                        report_bytes=report_bytes, view=view, pass_fds=pass_fds))  # fmt: skip


def start(argv: Sequence[str], work: Path, *, kind: str, limits: Limits | None = None, stdin: bytes | None = None,
          read_only: bool = False, env: Mapping[str, str] | None = None, report_bytes: int = 0,
          view: str = "agent", pass_fds: Sequence[int] = ()) -> Running:  # fmt: skip
    """Start what :func:`run` runs, without waiting for it."""
    limits = limits or Limits()
    if argv and argv[0] == "python":
        exe = interpreter(python()).real if kind == "bwrap" and view != "agent" else python()
        argv = [exe, *argv[1:]]
    pipe = os.pipe() if report_bytes else None
    environ = {**SAFE_ENV, **({} if view == "graded" else {"PYTHONPATH": library(kind)}), **(env or {})}
    environ["HOME"] = "/tmp" if kind == "bwrap" else "/nonexistent"
    if pipe:
        environ["SERVELAB_REPORT_FD"] = str(pipe[1])
    if kind == "bwrap":
        command, cwd, envp = _bwrap_argv(argv, work, limits, read_only, environ, view), None, None
    else:
        command, cwd, envp = list(argv), str(work), environ
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=envp,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(*pass_fds, *((pipe[1],) if pipe else ())),
            preexec_fn=functools.partial(_limit, limits),
        )
    finally:
        if pipe:
            os.close(pipe[1])
    return _started(proc, limits, kind, stdin, pipe[0] if pipe else None, report_bytes)


def _started(proc: subprocess.Popen[bytes], limits: Limits, kind: str, stdin: bytes | None, report_fd: int | None,
             cap: int) -> Running:  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    drains = [_Drain(os.dup(proc.stdout.fileno()), limits.output_bytes),
              _Drain(os.dup(proc.stderr.fileno()), limits.output_bytes)]  # fmt: skip
    if report_fd is not None:
        drains.append(_Drain(report_fd, cap))
    proc.stdout.close()
    proc.stderr.close()
    for drain in drains:
        drain.start()
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    return Running(proc, limits, kind, drains, report_fd is not None, time.monotonic())


def finish(running: Running, now: bool = False) -> SandboxResult:
    """Wait for the process (at most its time limit from its start; not at all with ``now``), kill its group,
    and return what it wrote."""
    proc, timed_out = running.proc, False
    try:
        left = 0.0 if now else running.limits.timeout_s - (time.monotonic() - running.started)
        proc.wait(timeout=max(left, 0.001))
    except subprocess.TimeoutExpired:
        timed_out = not now
    _kill_group(proc.pid)  # at the timeout, and anything the code left behind in its group
    proc.wait()
    for drain in running.drains:
        drain.join(timeout=5)  # an escaped process may hold a pipe (none mode): what came so far is kept
    out, err = bytes(running.drains[0].data), bytes(running.drains[1].data)
    return SandboxResult(
        None if timed_out or (now and proc.returncode is None) else proc.returncode,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
        timed_out,
        running.kind,
        raw_stdout=out,
        report=bytes(running.drains[2].data) if running.report else b"",
    )


def _feed(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError):
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
