"""The grading runtime: pytest and every pure-Python module it imports, copied from servelab's own environment into
a folder the sandbox mounts at /tmp/pylib, so the test process needs nothing of the sandbox's Python but its
standard library (the graded view masks every site-packages and dist-packages folder anyway).

The rule it keeps: a module pytest needs is in the folder, or servelab stops before any grading with a
:class:`UsageError` naming it; :func:`check_runtime` then imports them inside the graded view, from the folder
only, so an honest fix never grades "tampered" for want of pygments on the host. Nothing of servelab's own
files and nothing of a task's is copied there: the agent's sandbox mounts the same folder.
"""

from __future__ import annotations

import compileall
import functools
import importlib.util
import re
import shutil
from pathlib import Path

from servelab.core.errors import UsageError

REQUIRED = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments")
OPTIONAL = ("py",)  # pytest's shim for the old ``py`` library: copied when present
LAZY = re.compile(r"pygments/(lexers|styles|formatters)/")  # imported only to colour output: not compiled ahead
CHECK = """import sys
lib = sys.argv[1]
sys.path[:] = [lib] + [p for p in sys.path if "-packages" not in p]
import pytest, _pytest.terminal, pluggy, iniconfig, packaging, pygments
from pygments.lexers.python import PythonLexer
names = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments")
outside = [n for n in names if not sys.modules[n].__file__.startswith(lib + "/")]
print("ok" if not outside else "outside: " + ", ".join(outside))
"""


def build_runtime(lib: Path, required: tuple[str, ...] = REQUIRED) -> None:
    """Copy the runtime's modules into ``lib`` (readable by any user); :class:`UsageError` when one of ``required``
    is missing."""
    missing = []
    for name in (*required, *OPTIONAL):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            missing += [name] if name in required else []
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, lib / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, lib / origin.name)
    if missing:
        raise UsageError(
            f"the grading runtime needs {', '.join(missing)}, which servelab's Python cannot import",
            hint="install servelab with its dependencies (pip install servelab), which brings pytest and pygments",
        )
    compileall.compile_dir(lib, quiet=2, workers=1, rx=LAZY)  # so each test process need not compile pytest again
    for path in [lib, *lib.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


@functools.cache
def check_runtime(kind: str) -> None:
    """Import the runtime inside the graded view, from /tmp/pylib only; :class:`UsageError` when it fails."""
    from servelab.eval.sandbox import Limits, fresh_copy, library, run

    probe = fresh_copy()
    try:
        got = run(["python", "-I", "-B", "-c", CHECK, library(kind)], probe, kind=kind, view="graded+runtime",
                  limits=Limits(timeout_s=60), read_only=True)  # fmt: skip
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if got.stdout.strip() != "ok":
        why = got.stdout.strip() or (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"the grading runtime does not work in the sandbox: {why[:300]}",
                         hint="reinstall servelab with its dependencies (pytest, pluggy, iniconfig, packaging, "
                              "pygments)")  # fmt: skip
