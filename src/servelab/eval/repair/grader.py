"""Grade an agent's folder so that the code under test never holds what it is compared with.

1. Only what the agent may change is taken (:mod:`.harvest`); the rest of each tree is the task's own.
2. The graded package runs in a process of its own that holds no test and no reference: the tests run in
   another process and reach the package through pipes, sending only what they hand to it (names,
   arguments) and getting back plain data they compare themselves (:mod:`.session`, :mod:`._proxy`,
   :mod:`._wire`). Tests that draw fresh inputs compare with the reference, in a third process.
3. Each sandbox sees its tree and the interpreter, nothing of servelab, the task folder or the run store
   (:mod:`servelab.eval.mounts`), on any install.
4. Read from outside the test process, the grade is ``error`` when the run cannot be trusted: no closing report
   line, a report that disagrees with the exit code, tests the task does not define; "tampered" when the
   package's process answered with something that is not plain data (servelab's own loop never does).
   A skipped test counts as failed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.eval.repair.harvest import harvest
from servelab.eval.repair.session import build_trees, run_tests
from servelab.eval.repair.task import Task
from servelab.eval.repair.workspace import remove_tree
from servelab.eval.runtime import check_runtime
from servelab.eval.sandbox import Limits, fresh_copy


@dataclass
class RepoGrade:
    """Which tests passed; the outcome's inputs. ``error`` when the run could not be trusted ("tampered: ..."
    when the package's process answered the tests with something that is not plain data)."""

    passed: dict[str, bool] = field(default_factory=dict)
    exit_code: int | None = None
    error: str | None = None
    timed_out: bool = False
    harvest: dict[str, Any] = field(default_factory=dict)  # what was taken of the agent's folder, what dropped

    @property
    def tampered(self) -> bool:
        return bool(self.error and self.error.startswith("tampered"))

    @property
    def dropped(self) -> list[dict[str, str]]:
        return list(self.harvest.get("dropped", []))

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
            "tampered": self.tampered,
            "timed_out": self.timed_out,
            "harvest": self.harvest,
        }


def grade_workdir(task: Task, workdir: Path, kind: str, limits: Limits | None = None) -> RepoGrade:
    """Harvest ``workdir``'s editable files, build the trees and run every test (visible and hidden) against the
    package; a skipped test counts as failed. Never raises for what the folder holds."""
    check_runtime(kind)
    taken = harvest(workdir, task.rules, kind, original=sorted(p.name for p in task.repo.iterdir()))
    grade = RepoGrade(harvest=taken.to_dict())
    if taken.error:
        grade.error = taken.error
        grade.passed = dict.fromkeys(sorted(task.all_tests), False)
        return grade
    trees = build_trees(task, taken)
    try:
        result = run_tests(task, trees, kind, limits or Limits(timeout_s=120))
    finally:
        trees.remove()
    grade.exit_code, grade.timed_out = result.returncode, result.timed_out
    verdict(grade, task, result.report)
    return grade


def verdict(grade: RepoGrade, task: Task, report: bytes) -> None:
    """Fill ``grade`` from the report lines and the exit code, and say when the two do not add up."""
    phases, final, problem = _read_report(report)
    names = {n.split("[", 1)[0] for n in phases}
    grade.passed = {t: _passed(phases, t) for t in sorted(task.all_tests)}
    if grade.timed_out:
        grade.error = "the tests ran past the time limit"
    elif problem:
        grade.error = f"the test report cannot be read: {problem}"
    elif final is None:
        grade.error = _no_closing_line(grade.exit_code)
    elif final.get("exitstatus") != grade.exit_code:
        grade.error = f"pytest's exit status {final.get('exitstatus')} but the test process exited {grade.exit_code}"
    elif final.get("link") and "not plain data" in str(final["link"]):
        grade.error = f"tampered: {str(final['link'])[:300]}"
    elif names - task.all_tests:
        grade.error = f"tests the task does not define ran: {sorted(names - task.all_tests)[:3]}"
    elif grade.exit_code not in (0, 1):
        grade.error = f"pytest exited with status {grade.exit_code}"


def _no_closing_line(code: int | None) -> str:
    if code is not None and code < 0:
        return f"the test process was killed by signal {-code}"
    return "the test process ended before pytest finished (no closing report line)"


def _read_report(data: bytes) -> tuple[dict[str, dict[str, str]], dict[str, Any] | None, str | None]:
    phases: dict[str, dict[str, str]] = {}
    final: dict[str, Any] | None = None
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            return phases, final, "an unreadable line in the test report"
        if not isinstance(row, dict):
            return phases, final, "an unreadable line in the test report"
        if final is not None:
            return phases, final, "report lines after the closing line"
        if row.get("final") is True:
            final = row
        elif "node" in row:
            seen = phases.setdefault(str(row["node"]), {})
            when = str(row.get("when"))
            if when in seen:
                return phases, final, f"a test reported twice ({ascii(row['node'])[:80]})"
            seen[when] = "xfail" if row.get("xfail") else str(row.get("outcome"))
    return phases, final, None


def _passed(phases: dict[str, dict[str, str]], node: str) -> bool:
    """Set up, called and torn down without failure or skip; a parametrized test passes when every case does."""
    cases = [p for n, p in phases.items() if n == node or n.startswith(node + "[")]
    return bool(cases) and all(
        p.get("setup") == "passed" and p.get("call") == "passed" and p.get("teardown", "passed") == "passed"
        for p in cases
    )


def self_check(task: Task, kind: str, runs: int = 5) -> list[str]:
    """The task's own check: the broken repo fails exactly ``broken_fails``; the reference passes every test
    ``runs`` times in a row. Returns the problems found (empty: the task is sound)."""
    problems = []
    broken_copy = fresh_copy(task.repo)
    try:
        broken = grade_workdir(task, broken_copy, kind)
    finally:
        remove_tree(broken_copy)
    failing = sorted(t for t, ok in broken.passed.items() if not ok)
    if broken.error:
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
        remove_tree(fixed)
    return problems
