"""What each sandbox of a repo grading can see (servelab.eval.mounts, servelab.eval.runtime): the graded view holds
the interpreter and nothing else (no site-packages, no servelab, no task file); the agent's view has the system
with every Python package folder masked; no file of a task's hidden tests or reference is readable from either;
the test process takes pytest and pygments from servelab's runtime only, so an honest fix resolves where the
sandbox's Python has no site packages at all. Needs bubblewrap."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.core.errors import UsageError
from servelab.eval.mounts import _masks, _under, agent_view, graded_view
from servelab.eval.repair import Workspace, grade_workdir, load_task
from servelab.eval.runtime import CHECK, build_runtime
from servelab.eval.sandbox import Limits, fresh_copy, library, python, run
from tests.unit.eval.needs_bwrap import require_bwrap

require_bwrap()

TASK = load_task("inventory")
MARKERS = ("test_fresh_orders_agree_with_the_reference", "wanted[key] = wanted.get(key, 0) + quantity")
WALK = """import json, os, sys
markers = sys.argv[1:]
seen, hits, files = set(), [], 0
for root, dirs, names in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/dev", "/sys")]
    seen.update(p for p in (root,) if "packages" in p or "servelab" in p)
    for name in names:
        files += 1
        path = os.path.join(root, name)
        if name.endswith((".py", ".json", ".txt")) and os.path.isfile(path):
            try:
                text = open(path, errors="replace").read()
            except OSError:
                continue
            hits += [path for m in markers if m in text]
print(json.dumps([sorted(os.listdir("/")), sorted(seen), hits, files]))
"""


@pytest.fixture()
def work() -> Iterator[Path]:
    path = fresh_copy(files={"x.txt": "x"})
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_markers_are_in_the_task_files_only() -> None:
    assert MARKERS[0] in (TASK.root / "hidden" / "tests" / "test_hidden.py").read_text()
    assert MARKERS[1] in (TASK.root / "reference" / "inventory" / "core.py").read_text()
    assert MARKERS[1] not in (TASK.repo / "inventory" / "core.py").read_text()


@pytest.mark.parametrize("view", ["graded", "graded+runtime"])
def test_the_graded_view_holds_the_interpreter_and_nothing_of_the_answer(work: Path, view: str) -> None:
    got = run(["python", "-I", "-B", "-c", WALK, *MARKERS], work, kind="bwrap", view=view,
              limits=Limits(timeout_s=120), read_only=True)  # fmt: skip
    assert got.ok, got.stderr
    top, package_folders, hits, files = json.loads(got.stdout)
    assert set(top) <= {"usr", "lib", "lib64", "etc", "tmp", "dev", "proc"}
    assert package_folders == [] and hits == []
    assert files < 20_000  # the interpreter, its libraries and the runtime: not the host's /usr


def _search(work: Path, where: str) -> list[str]:
    """What an agent's shell finds of the answer under ``where`` (by file name, and by content)."""
    search = (f"find {where} -xdev \\( -path /proc -o -path /tmp/sandbox/x.txt \\) -prune -o \\( -name test_hidden.py "
              "-o -name task.json -o -path '*servelab/eval*' \\) -print 2>/dev/null | head -5; "
              f"grep -rlF --include=*.py --include=*.json -e '{MARKERS[0]}' -e '{MARKERS[1]}' "
              f"--exclude-dir=proc --exclude-dir=sys {where} 2>/dev/null | head -5; echo searched")  # fmt: skip
    said = Workspace(work, "bwrap", Limits(timeout_s=240)).shell(search).strip().splitlines()
    assert said[0] == "exit code 0" and said[-1] == "searched", said
    return said[1:-1]


def test_the_agent_finds_nothing_of_the_answer_on_the_whole_disk(work: Path) -> None:
    assert _search(work, "/") == []


def test_the_same_search_finds_the_answer_where_it_is(work: Path) -> None:
    """The control: with the task copied into the agent's own folder, the search above finds it there."""
    shutil.copytree(TASK.root, work / "copy")
    found = _search(work, "/tmp/sandbox")
    assert "/tmp/sandbox/copy/hidden/tests/test_hidden.py" in found
    assert "/tmp/sandbox/copy/reference/inventory/core.py" in found


def _tmpfs(argv: list[str]) -> set[str]:
    return {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--tmpfs"}


def test_every_python_package_folder_is_masked_in_the_agent_view() -> None:
    folders = {str(p) for d in ("/usr/lib", "/usr/local/lib") for p in Path(d).glob("python3*/*-packages")}
    assert folders and folders <= _tmpfs(agent_view(python()))
    graded = graded_view(python())
    assert all(p.endswith("-packages") for p in _tmpfs(graded)) and "/usr/local" not in " ".join(graded)


def test_pytest_and_pygments_come_from_the_runtime_only(work: Path) -> None:
    got = run(["python", "-I", "-B", "-c", CHECK, library("bwrap")], work, kind="bwrap", view="graded+runtime",
              read_only=True)  # fmt: skip
    assert got.stdout.strip() == "ok", got.stderr
    bare = run(["python", "-I", "-B", "-c", "import pygments"], work, kind="bwrap", view="graded", read_only=True)
    assert not bare.ok and "No module named 'pygments'" in bare.stderr  # the sandbox's Python has none


def test_an_honest_fix_resolves_where_the_sandbox_python_has_no_site_packages() -> None:
    fixed = fresh_copy(TASK.repo)
    try:
        shutil.copytree(TASK.root / "reference", fixed, dirs_exist_ok=True)
        grade = grade_workdir(TASK, fixed, "bwrap")
    finally:
        shutil.rmtree(fixed, ignore_errors=True)
    assert grade.resolved and grade.rate(TASK.all_tests) == (13, 13), grade.error


def test_a_runtime_without_a_module_pytest_needs_is_a_clear_error() -> None:
    lib = Path(tempfile.mkdtemp())
    try:
        with pytest.raises(UsageError, match="the grading runtime needs no_such_module_for_servelab"):
            build_runtime(lib, required=("pytest", "no_such_module_for_servelab"))
    finally:
        shutil.rmtree(lib)


FOLDERS = ["usr", "lib", "local", "python3", "site-packages", "x"]
folder_paths = st.lists(st.lists(st.sampled_from(FOLDERS), min_size=1, max_size=4), max_size=6)


@given(folder_paths, folder_paths)
def test_every_hidden_folder_under_a_bind_is_masked_once(paths: list[list[str]], binds: list[list[str]]) -> None:
    """For generated trees: each mask is a listed folder under a bound one; none lies under another mask; and
    every listed folder under a bound one is masked, itself or by a mask above it."""
    root = Path(tempfile.mkdtemp())
    try:
        for parts in paths:
            root.joinpath(*parts).mkdir(parents=True, exist_ok=True)
        listed = [str(root.joinpath(*p)) for p in paths]
        bound = [str(root.joinpath(*b)) for b in binds]
        ops = _masks(listed, bound)
        masked = [ops[i + 1] for i in range(0, len(ops), 2)]
        assert all(ops[i] == "--tmpfs" for i in range(0, len(ops), 2))
        assert set(masked) <= set(listed) and all(_under(m, bound) for m in masked)
        assert not any(_under(a, [b]) for a in masked for b in masked if a != b)
        assert all(_under(p, masked) for p in listed if _under(p, bound))
    finally:
        shutil.rmtree(root)
