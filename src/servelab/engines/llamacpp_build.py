"""Build llama.cpp's own C++ server (``llama-server``) once, into a cache, from PyPI's llama-cpp-python sdist.

The sdist carries llama.cpp's sources (``vendor/llama.cpp``, the server in ``tools/server``); a CPU build
with cmake, without the web UI (its assets would come from a Hugging Face bucket) and without curl or
OpenSSL. The binary lands in ``$SERVELAB_CACHE/llama-server/<version>-<digest of the build flags>/``
(default ``~/.cache/servelab``) and is reused by every later build call; ``SERVELAB_LLAMA_SERVER`` points
at another binary instead.

``python -m servelab.engines.llamacpp_build`` builds it (make test calls it); needs cmake and a C++ compiler.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from servelab.core.errors import EngineError

SDIST = "llama-cpp-python"
VERSION = "0.3.36"
SOURCE_PREFIX = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_NATIVE=OFF",  # -march=native picked AMX on a VM that faults on it (Illegal instruction)
)


def cpu_flags() -> tuple[str, ...]:
    """x86 extensions to build for: AVX2/FMA/F16C/BMI2 where the CPU reports them, never AVX-512 or AMX (their
    register state is not always granted inside a VM, and a binary built for them dies on start)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    flags = set(re.findall(r"^flags\s*:(.*)$", text, re.MULTILINE)[0].split()) if "flags" in text else set()
    if {"avx", "avx2", "fma", "f16c"} <= flags:
        return ("-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
                "-DGGML_BMI2=" + ("ON" if "bmi2" in flags else "OFF"))  # fmt: skip
    return ()


Log = Callable[[str], None]


def cache_root() -> Path:
    return Path(os.environ.get("SERVELAB_CACHE") or Path.home() / ".cache" / "servelab")


def build_key() -> str:
    """The version and a digest of the build flags: a change of flags builds anew instead of reusing."""
    digest = hashlib.sha256(" ".join((*CMAKE_FLAGS, *cpu_flags())).encode()).hexdigest()[:10]
    return f"{VERSION}-{digest}"


def binary_path() -> Path:
    override = os.environ.get("SERVELAB_LLAMA_SERVER")
    return Path(override) if override else cache_root() / "llama-server" / build_key() / "llama-server"


def usable(path: Path) -> bool:
    if not path.is_file() or not os.access(path, os.X_OK):
        return False
    try:
        return subprocess.run([str(path), "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def _lock(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".build-lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], log_file: Path, what: str) -> None:
    with log_file.open("a") as sink:
        sink.write(f"$ {' '.join(cmd)}\n")
        sink.flush()
        result = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-30:])
        raise EngineError(f"{what} failed (exit {result.returncode}); log {log_file}:\n{tail}")


def _sdist(work: Path, log_file: Path) -> Path:
    """The sdist from a local copy (SERVELAB_LLAMA_SDIST) or PyPI (pip download; no wheel, no dependencies)."""
    local = os.environ.get("SERVELAB_LLAMA_SDIST")
    if local:
        return Path(local)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           f"{SDIST}=={VERSION}", "-d", str(work)]  # fmt: skip
    _run(cmd, log_file, f"downloading the {SDIST} {VERSION} sdist")
    found = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise EngineError(f"pip download left no {SDIST} sdist in {work}")
    return found[0]


def _extract(sdist: Path, dest: Path) -> Path:
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(SOURCE_PREFIX)]
        if not members:
            raise EngineError(f"{sdist} has no {SOURCE_PREFIX}: not the llama-cpp-python sdist expected")
        archive.extractall(dest, members=members, filter="data")
    return dest / SOURCE_PREFIX


def build(jobs: int | None = None, log: Log = print) -> Path:
    """The llama-server binary: the cached one when it runs, else built now (minutes on a few cores)."""
    target = binary_path()
    if usable(target):
        return target
    if os.environ.get("SERVELAB_LLAMA_SERVER"):
        raise EngineError(f"SERVELAB_LLAMA_SERVER={target} is not a runnable llama-server")
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise EngineError(f"building llama-server needs {tool}", hint="apt-get install cmake g++ (make test does)")
    folder = target.parent
    with _lock(folder):
        if usable(target):
            return target
        log_file = folder / "build.log"
        log_file.write_text("")
        with tempfile.TemporaryDirectory(prefix="llama-build-") as tmp:
            work = Path(tmp)
            log(f"llama-server {VERSION}: fetching sources")
            source = _extract(_sdist(work, log_file), work / "src")
            log(f"llama-server {VERSION}: configuring (log {log_file})")
            flags = [*CMAKE_FLAGS, *cpu_flags()]
            _run(["cmake", "-S", str(source), "-B", str(work / "build"), *flags], log_file, "cmake configure")
            log(f"llama-server {VERSION}: compiling, a few minutes the first time")
            cores = jobs or max(1, os.cpu_count() or 1)
            _run(["cmake", "--build", str(work / "build"), "--target", "llama-server", "-j", str(cores)],
                 log_file, "cmake build")  # fmt: skip
            built = work / "build" / "bin" / "llama-server"
            if not built.is_file():
                raise EngineError(f"the build finished without {built}; log {log_file}")
            shutil.copy2(built, target)
    if not usable(target):
        raise EngineError(f"{target} was built but does not run; log {folder / 'build.log'}")
    return target


if __name__ == "__main__":
    try:
        print(build())
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
