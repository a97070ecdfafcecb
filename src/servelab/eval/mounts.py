"""What a bubblewrap sandbox sees of the host: two views, each a list of bwrap arguments.

- ``graded`` (the process that imports the graded package, the reference's, and the test process): a whitelist,
  the interpreter and nothing else of the host: its binary, its standard library, the shared libraries it loads
  (its LIBDIR, the multiarch and lib64 folders, /etc/ld.so.cache), every site-packages or dist-packages folder
  inside those masked by an empty tmpfs. No /usr/local, no venv, no servelab, no task folder, no run store, on
  any install: whatever is not on the list is not there.
- ``agent`` (the agent's shell and file tools, the harvest, the code suite): the system folders read-only so the
  agent has its tools, with every Python package folder under them masked (site-packages and dist-packages of
  every Python there, servelab's own folder and dist-info, servelab's venv) and every path given to
  :func:`hide` (a folder task, the run store) masked too, wherever servelab is installed.

Host symlinks on the way to a bound folder are made again inside (merged /usr: /lib -> usr/lib), so a folder
is reachable under one path only and its mask holds under every name.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
PACKAGE_FOLDERS = ("site-packages", "dist-packages")
_HIDDEN: set[str] = set()
_FACTS = """import json, os, site, sys, sysconfig
print(json.dumps({"real": os.path.realpath(sys.executable), "stdlib": sysconfig.get_path("stdlib"),
    "platstdlib": sysconfig.get_path("platstdlib"), "libdir": sysconfig.get_config_var("LIBDIR") or "",
    "multiarch": sysconfig.get_config_var("MULTIARCH") or "", "site": site.getsitepackages()}))
"""


@dataclass(frozen=True)
class Interpreter:
    real: str  # the binary, links resolved: what the graded view binds and runs
    stdlib: str
    platstdlib: str
    libdir: str
    multiarch: str
    site: tuple[str, ...]

    def lib_paths(self) -> list[str]:
        """The standard library, libpython (not the rest of its LIBDIR: /usr/local/lib in a container), the
        system's shared libraries and the loader's cache."""
        arch = [f"/lib/{self.multiarch}", f"/usr/lib/{self.multiarch}"] if self.multiarch else []
        libpython = sorted(glob.glob(os.path.join(self.libdir, "libpython*"))) if self.libdir else []
        return [self.stdlib, self.platstdlib, *libpython, *arch, "/lib64", "/usr/lib64", "/etc/ld.so.cache"]


@functools.cache
def interpreter(exe: str) -> Interpreter:
    """The facts of the interpreter ``exe`` (asked of itself, isolated, without site)."""
    out = subprocess.run([exe, "-I", "-S", "-c", _FACTS], capture_output=True, text=True, timeout=60, check=True)
    raw = json.loads(out.stdout)
    return Interpreter(raw["real"], raw["stdlib"], raw["platstdlib"], raw["libdir"], raw["multiarch"],
                       tuple(raw["site"]))  # fmt: skip


def hide(path: Path | str) -> None:
    """Never show ``path`` (a folder or file of the host) in an agent's sandbox, even under a system folder."""
    _HIDDEN.add(os.path.realpath(path))


def graded_view(exe: str) -> list[str]:
    """The whitelist: ``exe`` and what it needs to run the standard library, package folders masked."""
    facts = interpreter(exe)
    seen: set[str] = set()
    ops = [op for p in [facts.real, *facts.lib_paths()] if os.path.lexists(p) for op in _bind(p, seen)]
    bound = [s for s in seen if os.path.isdir(s)]
    return ops + _masks([*_package_folders(facts, bound), *_servelab_paths(), *sorted(_HIDDEN)], bound)


def agent_view(exe: str) -> list[str]:
    """The system folders and the interpreter ``exe`` (which may live elsewhere: a pyenv build), with every
    Python package folder, servelab and the hidden paths masked."""
    facts, seen = interpreter(exe), set[str]()
    ops = [op for d in SYSTEM_DIRS if os.path.lexists(d) for op in _bind(d, seen)]
    system = [s for s in seen if os.path.isdir(s)]
    own = [
        p for p in [facts.real, *facts.lib_paths()] if os.path.lexists(p) and not _under(os.path.realpath(p), system)
    ]
    ops += [op for p in own for op in _bind(p, seen)]
    bound = [s for s in seen if os.path.isdir(s)]
    hidden = [*_package_folders(facts, bound), *_servelab_paths(), *sorted(_HIDDEN)]
    return ops + _masks(hidden, bound)


def _bind(path: str, seen: set[str]) -> list[str]:
    """bwrap arguments that show the host's ``path`` at the same place, read-only, its links made again."""
    ops: list[str] = []
    current = "/"
    for part in Path(path).parts[1:]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            if current not in seen:
                seen.add(current)
                ops += ["--symlink", os.readlink(current), current]
            current = os.path.realpath(current)
    if current not in seen and os.path.exists(current):
        seen.add(current)
        ops += ["--ro-bind", current, current]
    return ops


def _package_folders(facts: Interpreter, bound: list[str]) -> list[str]:
    """site-packages and dist-packages of this interpreter and of every Python under the bound folders."""
    found = [*facts.site, *(os.path.join(d, f) for d in (facts.stdlib, facts.platstdlib) for f in PACKAGE_FOLDERS)]
    for root in bound:
        for pattern in ("lib/python3*/*-packages", "lib/python3/dist-packages", "python3*/*-packages",
                        "python3/dist-packages", "local/lib/python3*/*-packages"):  # fmt: skip
            found += glob.glob(os.path.join(root, pattern))
    return found


def _servelab_paths() -> list[str]:
    """servelab's package folder (its bundled tasks, hidden tests and references), its dist-info, its venv."""
    package = Path(__file__).resolve().parents[1]
    paths = [str(package), *glob.glob(str(package.parent / "servelab-*.dist-info"))]
    if sys.prefix != sys.base_prefix:
        paths.append(sys.prefix)
    return paths


def _masks(paths: list[str], bound: list[str]) -> list[str]:
    """An empty tmpfs over each folder (an empty file over each file) of ``paths`` that a bind shows."""
    ops: list[str] = []
    masked: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths}):
        if not _under(path, bound) or _under(path, masked) or not os.path.exists(path):
            continue
        masked.append(path)
        ops += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    return ops


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)
