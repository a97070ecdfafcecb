"""Grade an agent's folder so that neither its files nor the code under test can forge the grade.

1. The graded tree is servelab's: a fresh copy of the task's original repo, with only the editable paths
   replaced by what the harvest took (regular files, within caps; see :mod:`.harvest`), then the hidden tests
   and two canary tests whose names and values are drawn anew for each grading: one must pass, one must fail;
   and copies of the hidden tests with their expected values drawn anew, which must all fail (:mod:`.mutate`).
2. It runs read-only in the sandbox under servelab's runner (isolated interpreter, servelab's configuration,
   no plugin autoload, no conftest above the tree), which streams each report line to a pipe.
3. Read from outside that process, the grade is ``error`` with a reason starting "tampered" when the
   must-fail canary or a changed copy passed, the must-pass one did not, the process exited 0 (the must-fail
   canary always makes an honest run exit 1), the report has no closing line or disagrees with the exit code, or
   tests the task does not define ran. Canaries detect tampering; they cannot prevent it (see the README)."""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servelab.eval.repair.harvest import Harvest, harvest, write_tree
from servelab.eval.repair.mutate import expectation_copies
from servelab.eval.repair.task import Task
from servelab.eval.repair.workspace import remove_tree
from servelab.eval.sandbox import Limits, fresh_copy, library, run, seen_as

REPORT_BYTES = 4 << 20


@dataclass
class RepoGrade:
    """Which tests passed; the outcome's inputs. ``error`` when the run could not be trusted ("tampered: ..."
    when the report shows the code under test interfered with it)."""

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


@dataclass(frozen=True)
class Canaries:
    file: str  # relative to the tree
    must_pass: str  # node ids
    must_fail: str
    changed: tuple[str, ...] = ()  # hidden tests' copies with their expected values drawn anew (:mod:`.mutate`)

    @property
    def nodes(self) -> set[str]:
        return {self.must_pass, self.must_fail, *self.changed}

    @classmethod
    def draw(cls, task: Task) -> tuple[Canaries, str]:
        """New names and values each grading; the must-fail one imports the package like a real test would."""
        stem, ok, bad = (f"test_{secrets.token_hex(6)}" for _ in range(3))
        a, b = secrets.randbelow(10**9), secrets.randbelow(10**9) + 10**9
        package = next((e for e in task.editable if "/" not in e and not e.endswith(".py")), None)
        imports = f"    import {package}  # noqa: F401\n" if package and package.isidentifier() else ""
        text = (f"def {ok}():\n    assert {a} + {b} == {a + b}\n\n\n"
                f"def {bad}():\n{imports}    assert {a} * 2 == {a * 2 + b}\n")  # fmt: skip
        file = f"{task.tests_dir}/{stem}.py"
        return cls(file, f"{file}::{ok}", f"{file}::{bad}"), text


def build_tree(task: Task, taken: Harvest) -> tuple[Path, Canaries]:
    """The tree that is graded: the task's original repo (editable paths left out), the agent's harvested files,
    the hidden tests, the canaries. Root-owned where servelab is root, readable by the sandbox user."""
    tree = Path(tempfile.mkdtemp(prefix="servelab-grade-"))
    editable = {e.rstrip("/") for e in task.editable}
    shutil.copytree(task.repo, tree, dirs_exist_ok=True,
                    ignore=lambda d, names: [n for n in names if _skip(task.repo, Path(d) / n, editable)])  # fmt: skip
    write_tree(tree, taken.files)
    shutil.copytree(task.root / "hidden", tree, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    canaries, text = Canaries.draw(task)
    (tree / canaries.file).write_text(text)
    canaries = replace(canaries, changed=_write_changed_copies(task, tree))
    for path in [tree, *tree.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tree, canaries


def _write_changed_copies(task: Task, tree: Path) -> tuple[str, ...]:
    """Beside each hidden test file, its tests' copies with new expected values, in a file of a new name."""
    nodes: list[str] = []
    for source in sorted((task.root / "hidden").rglob("test*.py")):
        text, names = expectation_copies(source)
        if names:
            rel = (source.parent.relative_to(task.root / "hidden") / f"test_{secrets.token_hex(6)}.py").as_posix()
            (tree / rel).write_text(text)
            nodes += [f"{rel}::{name}" for name in names]
    return tuple(nodes)


def _skip(repo: Path, path: Path, editable: set[str]) -> bool:
    rel = path.relative_to(repo).as_posix()
    return rel in editable or path.name == "__pycache__"


def grade_workdir(task: Task, workdir: Path, kind: str, limits: Limits | None = None) -> RepoGrade:
    """Harvest ``workdir``'s editable files, build the graded tree and run every test (visible, hidden and the
    canaries) on it; a skipped test counts as failed. Never raises for what the folder holds."""
    taken = harvest(workdir, task.rules, kind, original=sorted(p.name for p in task.repo.iterdir()))
    grade = RepoGrade(harvest=taken.to_dict())
    if taken.error:
        grade.error = taken.error
        grade.passed = dict.fromkeys(sorted(task.all_tests), False)
        return grade
    tree, canaries = build_tree(task, taken)
    basetemp = None if kind == "bwrap" else Path(tempfile.mkdtemp(prefix="servelab-basetemp-"))
    try:
        root, lib = seen_as(tree, kind), library(kind)
        ini = f"{root}/pytest.ini" if (task.repo / "pytest.ini").is_file() else f"{lib}/servelab-grade.ini"
        runner = f"{lib}/servelab_grade_runner.py"
        result = run(["python", "-I", "-B", runner, root, ini, f"{root}/{task.tests_dir}",
                      str(basetemp) if basetemp else "/tmp/servelab-basetemp"],
                     tree, kind=kind, limits=limits or Limits(timeout_s=120), read_only=True,
                     report_bytes=REPORT_BYTES)  # fmt: skip
        grade.exit_code, grade.timed_out = result.returncode, result.timed_out
        verdict(grade, task, canaries, result.report)
        return grade
    finally:
        remove_tree(tree)
        if basetemp is not None:
            remove_tree(basetemp)


def verdict(grade: RepoGrade, task: Task, canaries: Canaries, report: bytes) -> None:
    """Fill ``grade`` from the report lines and the exit code, and say when the two do not add up."""
    phases, final, problem = _read_report(report)
    names = {n.split("[", 1)[0] for n in phases}
    grade.passed = {t: _passed(phases, t) for t in sorted(task.all_tests)}
    if grade.timed_out:
        grade.error = "the tests ran past the time limit"
    elif problem:
        grade.error = f"tampered: {problem}"
    elif final is None:
        grade.error = _no_closing_line(grade.exit_code)
    elif final.get("exitstatus") != grade.exit_code:
        grade.error = (
            f"tampered: pytest's exit status {final.get('exitstatus')} but the process exited {grade.exit_code}"
        )
    elif _passed(phases, canaries.must_fail):
        grade.error = "tampered: a canary test that must fail passed"
    elif read := [n for n in canaries.changed if _passed(phases, n)]:
        grade.error = (
            f"tampered: {len(read)} cop{'y' if len(read) == 1 else 'ies'} of a hidden test with its "
            f"expected value changed passed (the code read what it was compared with): {read[0]}"
        )
    elif not _passed(phases, canaries.must_pass):
        grade.error = "tampered: a canary test that must pass did not"
    elif grade.exit_code == 0:
        grade.error = "tampered: the process exited 0, but the canary test that must fail did not pass"
    elif names - task.all_tests - canaries.nodes:
        grade.error = f"tampered: tests the task does not define ran: {sorted(names - task.all_tests)[:3]}"
    elif grade.exit_code != 1:
        grade.error = f"pytest exited with status {grade.exit_code}"


def _no_closing_line(code: int | None) -> str:
    if code is not None and code < 0:
        return f"the test process was killed by signal {-code}"
    return "tampered: the test process ended before pytest finished (no closing report line)"


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
