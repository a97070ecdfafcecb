"""The repo-repair task checks itself, and grading resists what an agent might leave behind. Runs in the
bubblewrap sandbox (make test installs it)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.eval.repair import builtin_tasks, grade_workdir, load_task, self_check
from servelab.eval.sandbox import fresh_copy
from tests.unit.eval.needs_bwrap import require_bwrap

require_bwrap()

TASK = load_task("inventory")
TRAPS = {"sku-normalization", "merge-rows", "atomic-reservation", "sales-tie-break", "inclusive-discount",
         "round-half-up"}  # fmt: skip


@pytest.fixture()
def fixed() -> Iterator[Path]:
    work = fresh_copy(TASK.repo)
    shutil.copytree(TASK.root / "reference", work, dirs_exist_ok=True)
    yield work
    shutil.rmtree(work, ignore_errors=True)


def test_task_shape() -> None:
    assert "inventory" in builtin_tasks()
    assert len(TASK.visible) == 6 and len(TASK.all_tests) == 13
    assert set(TASK.traps.values()) == TRAPS


@pytest.mark.parametrize("name", builtin_tasks())
def test_every_task_checks_itself(name: str) -> None:
    """The broken original fails what it should; the reference solution passes 5 times in a row."""
    assert self_check(load_task(name), "bwrap", runs=5) == []


def test_broken_original_matrix() -> None:
    grade = grade_workdir(TASK, TASK.repo, "bwrap")
    assert not grade.resolved and grade.error is None
    assert grade.rate(TASK.visible) == (5, 6)  # the visible tests show one trap
    assert grade.rate(TASK.all_tests - TASK.visible) == (0, 7)  # the hidden ones catch the rest
    assert grade.traps(TASK) == dict.fromkeys(TRAPS, False)


def test_agent_conftest_and_pytest_config_do_not_count(fixed: Path) -> None:
    (fixed / "inventory" / "core.py").write_text(TASK.repo.joinpath("inventory/core.py").read_text())  # unfix
    (fixed / "conftest.py").write_text(
        "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    out = yield\n    out.get_result().outcome = 'passed'\n"
    )
    (fixed / "pytest.ini").write_text("[pytest]\naddopts = -k 'not hidden'\n")
    grade = grade_workdir(TASK, fixed, "bwrap")
    assert grade.error is None and not grade.resolved and grade.rate(TASK.all_tests)[0] == 5


def test_agent_edits_to_visible_tests_are_undone_and_skips_count_as_failures(fixed: Path) -> None:
    (fixed / "tests" / "test_inventory.py").write_text("def test_nothing():\n    pass\n")
    assert grade_workdir(TASK, fixed, "bwrap").resolved  # the task's own tests came back, and pass
    core = fixed / "inventory" / "core.py"
    core.write_text("import pytest\npytest.skip('not today', allow_module_level=True)\n" + core.read_text())
    grade = grade_workdir(TASK, fixed, "bwrap")
    assert not grade.resolved and grade.rate(TASK.all_tests)[0] == 0


def test_an_editable_file_inside_a_package_is_taken_from_the_agent(tmp_path: Path) -> None:
    """A task may make one file editable ("inventory/core.py"): the rest of the package is the task's own."""
    task_dir = tmp_path / "task"
    shutil.copytree(TASK.root, task_dir)
    raw = json.loads((task_dir / "task.json").read_text())
    (task_dir / "task.json").write_text(json.dumps({**raw, "editable": ["inventory/core.py"]}))
    task = load_task(str(task_dir))
    fixed = fresh_copy(task.repo)
    try:
        shutil.copytree(task.root / "reference", fixed, dirs_exist_ok=True)
        (fixed / "inventory" / "__init__.py").write_text('raise SystemExit("not for the agent to change")\n')
        grade = grade_workdir(task, fixed, "bwrap")
    finally:
        shutil.rmtree(fixed, ignore_errors=True)
    assert grade.resolved and grade.harvest["taken"] == ["inventory/core.py"], grade.error
