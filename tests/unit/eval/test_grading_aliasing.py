"""Aliasing graded end to end: hidden tests about whether the package changes the caller's list, hands out its own
list, or fills the list it is given. Before the grading link shared mutable containers (servelab.eval.repair.
_shared), every list crossed as a copy: an untouched repo that sorts the caller's list in place, or hands out its
own list, was graded resolved (the test's list never changed, the package's never saw the test's change), and a
correct in-place repair was graded failed. Each task here is played by scripted agents through servelab's real
agent loop, tools, harvest and grading (``run_repo``), and the same files run under plain pytest, outside servelab,
say what the grade must be. Needs bubblewrap."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.core.store import RunStore
from servelab.eval.grade import Outcome
from servelab.eval.repair import AgentLimits, Attempt, Task, run_repo
from servelab.eval.sandbox import Limits
from servelab.load.runner import Target
from tests.fixtures.scripted_agent import Turn, serve_agents
from tests.unit.eval import repair_attack_kit as kit
from tests.unit.eval.needs_bwrap import require_bwrap
from tests.unit.eval.repair_attack_kit import write

require_bwrap()


def _task(name: str, instructions: str, broken_fails: list[str], files: dict[str, str]) -> dict[str, str]:
    spec = {"name": name, "instructions": f"{instructions} Do not change the tests. Call finish when you are done.",
            "tests_dir": "tests", "editable": [name], "broken_fails": broken_fails}  # fmt: skip
    init = f'"""{name}."""\n\nfrom {name}.core import *  # noqa: F403\n'
    return {"task.json": json.dumps(spec), f"repo/{name}/__init__.py": init, **files}


MEDIAN_BROKEN = '''def median(values):
    """The median of values; the caller's list is left as it was."""
    values.sort()
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
'''
MEDIAN_FIXED = MEDIAN_BROKEN.replace("    values.sort()\n", "    values = sorted(values)\n")
MEDIAN = _task("middle", "The package middle/ has a bug: median must not change the list it is given. Fix it.",
               ["tests/test_middle_hidden.py::test_the_callers_list_is_left_as_it_was"], {
    "repo/middle/core.py": MEDIAN_BROKEN,
    "reference/middle/core.py": MEDIAN_FIXED,
    "repo/tests/test_middle.py": "from middle import median\n\n\ndef test_odd() -> None:\n"
                                 "    assert median([3, 1, 2]) == 2\n",
    "hidden/tests/test_middle_hidden.py": """from middle import median


def test_the_callers_list_is_left_as_it_was() -> None:
    values = [5, 1, 4, 2]
    assert median(values) == 3
    assert values == [5, 1, 4, 2]
""",
})  # fmt: skip

PAD_BROKEN = '''def pad(row, width):
    """Pads row in place with zeros up to width items."""
    row = row + [0] * (width - len(row))
'''
PAD_FIXED = '''def pad(row, width):
    """Pads row in place with zeros up to width items."""
    row.extend([0] * (width - len(row)))
'''
PAD = _task("padding", "The package padding/ has a bug: pad must pad the row it is given, in place. Fix it.",
            ["tests/test_padding_hidden.py::test_the_row_given_is_padded"], {
    "repo/padding/core.py": PAD_BROKEN,
    "reference/padding/core.py": PAD_FIXED,
    "repo/tests/test_padding.py": "from padding import pad\n\n\ndef test_returns_nothing() -> None:\n"
                                  "    assert pad([1], 2) is None\n",
    "hidden/tests/test_padding_hidden.py": """from padding import pad


def test_the_row_given_is_padded() -> None:
    row = [7]
    pad(row, 3)
    assert row == [7, 0, 0]
""",
})  # fmt: skip

SHELF_BROKEN = '''class Shelf:
    def __init__(self):
        self._books = []

    def add(self, title):
        self._books.append(title)

    def books(self):
        """The titles, as a new list: changing it does not change the shelf."""
        return self._books
'''
SHELF_FIXED = SHELF_BROKEN.replace("        return self._books\n", "        return list(self._books)\n")
SHELF = _task("shelf", "The package shelf/ has a bug: Shelf.books must return a new list. Fix it.",
              ["tests/test_shelf_hidden.py::test_changing_the_list_leaves_the_shelf",
               "tests/test_shelf_hidden.py::test_a_list_handed_out_earlier_stays_as_it_was"], {
    "repo/shelf/core.py": SHELF_BROKEN,
    "reference/shelf/core.py": SHELF_FIXED,
    "repo/tests/test_shelf.py": "from shelf import Shelf\n\n\ndef test_add() -> None:\n    s = Shelf()\n"
                                "    s.add('a')\n    assert s.books() == ['a']\n",
    "hidden/tests/test_shelf_hidden.py": """from shelf import Shelf


def test_changing_the_list_leaves_the_shelf() -> None:
    shelf = Shelf()
    shelf.add("dune")
    shelf.books().append("emma")
    assert shelf.books() == ["dune"]


def test_a_list_handed_out_earlier_stays_as_it_was() -> None:
    shelf = Shelf()
    before = shelf.books()
    shelf.add("dune")
    assert before == []
""",
})  # fmt: skip

TASKS = {"middle": MEDIAN, "padding": PAD, "shelf": SHELF}
UNTOUCHED: Turn = [("read_file", {"path": "README.md"})]
AGENTS: dict[str, tuple[str, list[Turn], bool]] = {  # name -> (task, turns, resolved as plain pytest says)
    "middle-untouched": ("middle", [UNTOUCHED], False),
    "middle-fixed": ("middle", [write("middle/core.py", MEDIAN_FIXED)], True),
    "padding-untouched": ("padding", [UNTOUCHED], False),
    "padding-fixed": ("padding", [write("padding/core.py", PAD_FIXED)], True),
    "shelf-untouched": ("shelf", [UNTOUCHED], False),
    "shelf-fixed": ("shelf", [write("shelf/core.py", SHELF_FIXED)], True),
}


@pytest.fixture(scope="module")
def tasks() -> Iterator[dict[str, Task]]:
    base = Path(tempfile.mkdtemp(prefix="aliasing-tasks-"))
    base.chmod(0o755)
    try:
        yield {name: kit.make_task(base / name, files) for name, files in TASKS.items()}
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def attempts(tasks: dict[str, Task], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Attempt]:
    out: dict[str, Attempt] = {}
    limits = AgentLimits(max_steps=6, timeout_s=120, shell=Limits(timeout_s=30))
    for task_name, task in tasks.items():
        scripts = {n: [*turns, [("finish", {"summary": "done"})]] for n, (t, turns, _) in AGENTS.items()
                   if t == task_name}  # fmt: skip
        store = RunStore(tmp_path_factory.mktemp(f"aliasing-{task_name}") / "runs.sqlite")
        with serve_agents(scripts) as url:
            result = run_repo(store, [Target(n, url, n) for n in scripts], task, "bwrap", limits=limits)
        out |= {a.target: a for a in result.attempts}
    return out


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_aliasing_is_graded_as_plain_pytest_says(tasks: dict[str, Task], attempts: dict[str, Attempt],
                                                 name: str) -> None:  # fmt: skip
    task_name, turns, resolved = AGENTS[name]
    task = tasks[task_name]
    code, said = kit.plain_pytest(task, kit.harvested(task, turns))
    assert (code == 0) is resolved, said  # what the tests really say of these files
    grade = attempts[name].grade
    assert grade.resolved is resolved, grade.to_dict(task)
    assert (attempts[name].outcome is Outcome.CORRECT) is resolved
