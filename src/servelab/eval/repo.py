"""Repo repair: a broken package, visible tests, hidden tests; graded in a fresh copy with the hidden tests put
in only then. A task is a folder under ``eval/tasks/``: ``task.json``, ``repo/`` (what the agent gets),
``hidden/`` (tests added at grading), ``reference/`` (files that fix ``repo/``)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.core.errors import UsageError
from servelab.eval.sandbox import Limits, fresh_copy, run

PYTEST_CONFIG = ("pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", ".pytest.ini")


@dataclass(frozen=True)
class Task:
    name: str
    root: Path
    instructions: str
    tests_dir: str
    traps: dict[str, str]  # test node id -> trap name
    broken_fails: tuple[str, ...]  # the tests the untouched repo must fail (self-check)

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def visible(self) -> set[str]:
        return set(_node_ids(self.repo / self.tests_dir, self.tests_dir))

    @property
    def all_tests(self) -> set[str]:
        return self.visible | set(_node_ids(self.root / "hidden" / self.tests_dir, self.tests_dir))


def _node_ids(folder: Path, prefix: str) -> list[str]:
    """``tests/test_x.py::test_name`` for each top-level test function (what the task's files hold)."""
    out = []
    for path in sorted(folder.glob("test_*.py")):
        for line in path.read_text().splitlines():
            if line.startswith("def test_"):
                out.append(f"{prefix}/{path.name}::{line[4:].split('(')[0]}")
    return out


def tasks_root() -> Path:
    return Path(str(resources.files("servelab.eval") / "tasks"))


def builtin_tasks() -> list[str]:
    return sorted(p.name for p in tasks_root().iterdir() if (p / "task.json").is_file())


def load_task(name_or_path: str) -> Task:
    root = Path(name_or_path) if "/" in name_or_path else tasks_root() / name_or_path
    if not (root / "task.json").is_file():
        raise UsageError(f"no repo task {name_or_path!r}", hint=f"one of {', '.join(builtin_tasks())}, or a folder")
    raw = json.loads((root / "task.json").read_text())
    return Task(
        name=raw["name"],
        root=root,
        instructions=raw["instructions"],
        tests_dir=raw.get("tests_dir", "tests"),
        traps=dict(raw.get("traps", {})),
        broken_fails=tuple(raw.get("broken_fails", ())),
    )


@dataclass
class RepoGrade:
    """Which tests passed; the outcome's inputs. ``error`` when the run could not be trusted."""

    passed: dict[str, bool] = field(default_factory=dict)
    exit_code: int | None = None
    error: str | None = None
    timed_out: bool = False
    removed: list[str] = field(default_factory=list)  # agent-added pytest configuration taken out

    def rate(self, tests: set[str]) -> tuple[int, int]:
        return sum(self.passed.get(t, False) for t in tests), len(tests)

    @property
    def resolved(self) -> bool:
        return self.error is None and bool(self.passed) and all(self.passed.values())

    def traps(self, task: Task) -> dict[str, bool]:
        """A trap is handled when every test that probes it passed."""
        out: dict[str, bool] = {}
        for test, trap in task.traps.items():
            out[trap] = out.get(trap, True) and self.passed.get(test, False)
        return out

    def to_dict(self, task: Task) -> dict[str, Any]:
        visible, hidden = self.rate(task.visible), self.rate(task.all_tests - task.visible)
        return {
            "resolved": self.resolved,
            "visible": {"passed": visible[0], "total": visible[1]},
            "hidden": {"passed": hidden[0], "total": hidden[1]},
            "traps": self.traps(task),
            "tests": self.passed,
            "exit_code": self.exit_code,
            "error": self.error,
            "timed_out": self.timed_out,
            "removed": self.removed,
        }


def prepare_grading_copy(task: Task, workdir: Path) -> tuple[Path, list[str]]:
    """A fresh copy of the agent's folder: its pytest configuration and conftest.py files removed, its tests
    folder replaced by the task's visible tests plus the hidden ones."""
    work = fresh_copy(workdir)
    removed = []
    for path in sorted(work.rglob("*")):
        if path.is_file() and (path.name == "conftest.py" or path.name in PYTEST_CONFIG):
            removed.append(str(path.relative_to(work)))
            path.unlink()
    shutil.rmtree(work / task.tests_dir, ignore_errors=True)
    fresh = fresh_copy(task.repo / task.tests_dir)
    shutil.copytree(fresh, work / task.tests_dir, dirs_exist_ok=True)
    shutil.copytree(task.root / "hidden", work, dirs_exist_ok=True)
    shutil.rmtree(fresh, ignore_errors=True)
    _give_to_sandbox(work)
    return work, removed


def _give_to_sandbox(work: Path) -> None:
    import os

    if os.geteuid() == 0:
        for path in [work, *work.rglob("*")]:
            os.chown(path, 65534, 65534, follow_symlinks=False)


def grade_workdir(task: Task, workdir: Path, kind: str, limits: Limits | None = None) -> RepoGrade:
    """Run every test (visible and hidden) on a fresh copy of ``workdir``; a skipped test counts as failed,
    and the exit code must agree with the junit report."""
    work, removed = prepare_grading_copy(task, workdir)
    try:
        result = run(
            ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--junitxml=junit.xml",
             task.tests_dir],
            work,
            kind=kind,
            limits=limits or Limits(timeout_s=120),
        )  # fmt: skip
        grade = RepoGrade(exit_code=result.returncode, timed_out=result.timed_out, removed=removed)
        if result.timed_out:
            grade.error = "the tests ran past the time limit"
            return grade
        _read_junit(grade, work / "junit.xml", task)
        if grade.error is None and (result.returncode == 0) != all(grade.passed.values()):
            grade.error = f"exit code {result.returncode} disagrees with the junit report"
        return grade
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _read_junit(grade: RepoGrade, path: Path, task: Task) -> None:
    if not path.is_file():
        grade.error = "pytest wrote no junit report (collection failed?)"
        grade.passed = dict.fromkeys(task.all_tests, False)
        return
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        grade.error = f"unreadable junit report: {exc}"
        return
    seen: dict[str, bool] = {}
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        node = f"{module}.py::{case.get('name', '')}"
        seen[node] = not any(child.tag in ("failure", "error", "skipped") for child in case)
    grade.passed = {test: seen.get(test, False) for test in sorted(task.all_tests)}  # missing = failed
    extra = set(seen) - task.all_tests
    if extra:
        grade.error = f"tests the task does not define ran: {sorted(extra)[:3]}"


def self_check(task: Task, kind: str, runs: int = 5) -> list[str]:
    """The task's own check: the broken repo fails exactly ``broken_fails``; the reference passes every test
    ``runs`` times in a row. Returns the problems found (empty: the task is sound)."""
    problems = []
    broken = grade_workdir(task, task.repo, kind)
    failing = sorted(t for t, ok in broken.passed.items() if not ok)
    if broken.error and broken.error.startswith("tests the task"):
        problems.append(f"broken repo: {broken.error}")
    if failing != sorted(task.broken_fails):
        problems.append(f"the broken repo fails {failing}, expected {sorted(task.broken_fails)}")
    fixed = fresh_copy(task.repo)
    try:
        shutil.copytree(task.root / "reference", fixed, dirs_exist_ok=True)
        for attempt in range(runs):
            grade = grade_workdir(task, fixed, kind)
            if not grade.resolved:
                bad = [t for t, ok in grade.passed.items() if not ok]
                problems.append(f"reference run {attempt + 1}: {grade.error or 'failed ' + ', '.join(bad)}")
                break
    finally:
        shutil.rmtree(fixed, ignore_errors=True)
    return problems
