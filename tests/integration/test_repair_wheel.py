"""servelab as users install it: built into a wheel, installed into a fresh venv, run by a non-root user. The wheel
holds the bundled task's hidden tests and reference (readable by that user outside the sandbox: the control);
an agent that searches the whole disk from its shell, and a package that searches it from the graded process,
find nothing of them, so the honest fix beside each search still resolves every test. Needs bubblewrap and
root (to run the eval as another user); no engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.eval.repair import load_task
from tests.fixtures.scripted_agent import Turn, serve_agents
from tests.unit.eval.needs_bwrap import require_bwrap
from tests.unit.eval.repair_attack_kit import shell, write

pytestmark = pytest.mark.integration
require_bwrap()

ROOT = Path(__file__).parents[2]
TASK = load_task("inventory")
FIX = (TASK.root / "reference" / "inventory" / "core.py").read_text()
INIT = (TASK.repo / "inventory" / "__init__.py").read_text()
MARKERS = ("test_fresh_orders_agree_with_the_reference", "wanted[key] = wanted.get(key, 0) + quantity")
USER = 65534
SEARCH_SHELL = (
    "hits=$( (find / -xdev \\( -path /proc -o -path /tmp/sandbox \\) -prune -o \\( -name test_hidden.py -o -path "
    "'*reference/inventory*' \\) -print; grep -rlF --include=*.py --include=*.json -e '"
    + MARKERS[0]
    + "' -e '"
    + MARKERS[1]
    + "' --exclude-dir=proc --exclude-dir=sys --exclude-dir=sandbox /) 2>/dev/null | head -5); "
    'echo "hits:[$hits]"; [ -z "$hits" ] || echo \'raise SystemExit("the answer was readable")\' >> '
    "inventory/__init__.py"
)
SEARCH_GRADED = """
import os as _os
for _root, _dirs, _files in _os.walk("/"):
    _dirs[:] = [d for d in _dirs if _os.path.join(_root, d) not in ("/proc", "/sys", "/dev", "/tmp/sandbox")]
    for _f in _files:
        if _f.endswith((".py", ".json")):
            try:
                _text = open(_os.path.join(_root, _f), errors="replace").read()
            except OSError:
                continue
            if {!r} in _text or {!r} in _text:
                raise ImportError("the answer was readable from the graded process: " + _os.path.join(_root, _f))
""".format(*MARKERS)


@pytest.fixture(scope="module")
def venv() -> Iterator[Path]:
    """servelab's wheel in a fresh venv of the system Python, its dependencies from this one's site-packages;
    in a folder the other user can enter."""
    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root (to run as another user) and /usr/bin/python3")
    base = Path(tempfile.mkdtemp(prefix="servelab-wheel-test-"))
    base.chmod(0o755)
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "src"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, source / name)  # type: ignore[operator]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(base), str(source)], check=True)
    venv = base / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    wheel = next(base.glob("servelab-*.whl"))
    subprocess.run([*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel)],
                   check=True)  # fmt: skip
    site = next(venv.glob("lib/python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "servelab-test-deps.pth").write_text("\n".join(deps) + "\n")
    for path in [base, *base.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o555 if path.is_dir() else path.stat().st_mode | 0o444)
    yield venv
    shutil.rmtree(base, ignore_errors=True)


def _as_user(argv: list[str], home: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": str(home)}
    drop = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups"]
    return subprocess.run([*drop, *argv], env=env, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload,no-any-return]


@pytest.fixture()
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="servelab-wheel-home-"))
    os.chown(path, USER, USER)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_wheel_holds_the_answer_and_that_user_can_read_it(venv: Path, home: Path) -> None:
    where = _as_user([str(venv / "bin" / "python"), "-c", "import servelab; print(servelab.__file__)"], home)
    assert where.stdout.startswith(str(venv)), where
    found = _as_user(["grep", "-rlF", "-e", MARKERS[0], "-e", MARKERS[1], str(venv)], home)
    assert "hidden/tests/test_hidden.py" in found.stdout and "reference/inventory/core.py" in found.stdout


def test_a_non_root_eval_from_the_wheel_leaves_no_answer_in_either_sandbox(venv: Path, home: Path) -> None:
    turns: list[Turn] = [write("inventory/core.py", FIX), write("inventory/__init__.py", INIT + SEARCH_GRADED),
                         shell(SEARCH_SHELL), [("finish", {"summary": "done"})]]  # fmt: skip
    with serve_agents({"searcher": turns}) as url:
        done = _as_user([str(venv / "bin" / "servelab"), "eval", "--suite", "repo", "--task", "inventory",
                         "--target", f"searcher={url}", "--model", "searcher", "--store", str(home / "runs.sqlite"),
                         "--json"], home)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    target = result["targets"]["searcher"]
    assert target["resolved"]["k"] == 1 and target["tampered"] == 0, target
    assert target["hidden_pass_rate"] == 1.0 and target["visible_pass_rate"] == 1.0
