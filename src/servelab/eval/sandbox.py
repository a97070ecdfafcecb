"""Run model-written code without Docker: a fresh temporary copy, a non-root user, rlimits, a process-group
kill, and bubblewrap for no network and a read-only system.

``bwrap`` mode: every namespace unshared (network included: only an unconfigured loopback inside), only the
system folders bound read-only (no home folders or checkouts: nothing of servelab's tasks, hidden tests
included, is visible), a private /tmp, /dev and /proc, the work folder bound read-write at /tmp/sandbox, and
bwrap as the pid namespace's init: killing it ends every process inside. ``none`` mode (only with --unsafe):
the same user, rlimits and kill, no namespaces.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.core.errors import UsageError

NOBODY = 65534
PYLIB = "/tmp/pylib"  # inside: a read-only copy of pytest and its dependencies
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py")
INSIDE = "/tmp/sandbox"  # inside the private /tmp: the host root is read-only


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 30.0
    memory_mb: int = 1024  # address space
    processes: int = 64  # for the sandbox user, system-wide
    file_mb: int = 64  # largest file written
    output_bytes: int = 64_000  # kept of stdout / stderr each


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    timed_out: bool
    sandbox: str  # "bwrap" or "none"

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
    """A new temporary work folder (a copy of ``source``, plus ``files``) the sandbox user may write."""
    work = Path(tempfile.mkdtemp(prefix="servelab-sandbox-"))
    if source is not None:
        shutil.copytree(source, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    for name, text in (files or {}).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    if os.geteuid() == 0:
        for path in [work, *work.rglob("*")]:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    return work


def python() -> str:
    """The interpreter the sandbox user can run: the system one when we drop from root (our own may live
    under /root, which that user cannot enter), else ours."""
    if os.geteuid() == 0:
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if os.path.exists(candidate):
                return candidate
    return sys.executable


@functools.cache
def pytest_lib() -> Path:
    """pytest and its pure-Python dependencies copied where any user can read them (put on PYTHONPATH)."""
    lib = Path(tempfile.mkdtemp(prefix="servelab-pylib-"))
    for name in PYTEST_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, lib / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, lib / origin.name)
    for path in [lib, *lib.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return lib


SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")


def _system_binds() -> list[str]:
    """The system read-only, and nothing else of the host's files: no home folders, checkouts or caches
    (where another copy of a task's hidden tests could be). The interpreter's own prefix when it is ours."""
    dirs = [*SYSTEM_DIRS]
    if python() == sys.executable:
        dirs += [sys.base_prefix, sys.prefix]
    out: list[str] = []
    for d in dict.fromkeys(dirs):
        out += ["--ro-bind-try", d, d]
    return out


def _bwrap_argv(argv: Sequence[str], work: Path) -> list[str]:
    return [
        "bwrap",
        *_system_binds(),
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--bind", str(work), INSIDE,
        "--ro-bind", str(pytest_lib()), PYLIB,
        "--chdir", INSIDE,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
        "--setenv", "HOME", INSIDE,
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONPATH", PYLIB,
        *argv,
    ]  # fmt: skip


def run(argv: Sequence[str], work: Path, *, kind: str, limits: Limits | None = None) -> SandboxResult:
    """Run ``argv`` in ``work`` (seen as /tmp/sandbox under bwrap); never raises for what the code does.
    An ``argv[0]`` of "python" is the interpreter the sandbox user can run, with pytest importable."""
    limits = limits or Limits()
    if argv and argv[0] == "python":
        argv = [python(), *argv[1:]]
    if kind == "bwrap":
        command, cwd, env = _bwrap_argv(argv, work), None, None
    else:
        command, cwd = list(argv), str(work)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(work),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(pytest_lib()),
        }
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=functools.partial(_limit, limits),
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        out, err = proc.communicate()
    _kill_group(proc.pid)  # anything the code left behind in its group
    return SandboxResult(
        None if timed_out else proc.returncode,
        out[: limits.output_bytes].decode("utf-8", errors="replace"),
        err[: limits.output_bytes].decode("utf-8", errors="replace"),
        timed_out,
        kind,
    )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
