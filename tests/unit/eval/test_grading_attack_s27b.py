"""Attack s27b, end to end: folder tasks graded by servelab's real grade_workdir under bubblewrap, each compared
with what plain pytest says of the very same files outside servelab. Every test asserts the right grade; each
failed on cbc94b7 and holds since. Needs bubblewrap."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.eval.repair import Task
from tests.unit.eval import repair_attack_kit as kit
from tests.unit.eval.needs_bwrap import require_bwrap

require_bwrap()


def _task_json(name: str, package: str) -> str:
    return json.dumps({"name": name, "instructions": f"Fix {package}/. Do not change the tests.", "tests_dir": "tests",
                       "editable": [package]})  # fmt: skip


# --- "bank": a negative amount must raise an Exception (the broken code raises a BaseException subclass) --------
BANK_BROKEN = '''"""An account."""


class Abort(BaseException):
    """Stops everything."""


class Account:
    def __init__(self):
        self.balance = 10

    def withdraw(self, amount):
        """Takes ``amount``; a negative amount raises an Exception (callers catch Exception)."""
        if amount < 0:
            raise Abort("negative")  # bug: not an Exception
        self.balance -= amount + 1  # bug: a fee nobody asked for
        return self.balance
'''
BANK_WRONG = BANK_BROKEN.replace("amount + 1", "amount")  # fixes what the visible test sees only
BANK_RIGHT = BANK_WRONG.replace("class Abort(BaseException):", "class Abort(Exception):")
BANK = {
    "task.json": _task_json("bank", "bank"),
    "repo/bank/__init__.py": "from bank.core import Abort, Account\n",
    "repo/bank/core.py": BANK_BROKEN,
    "repo/tests/test_bank.py": "from bank import Account\n\n\ndef test_withdraw():\n"
    "    assert Account().withdraw(3) == 7\n",
    "hidden/tests/test_bank_hidden.py": """import pytest

from bank import Account


def test_a_negative_amount_is_an_exception():
    with pytest.raises(Exception):
        Account().withdraw(-1)
""",
    "reference/bank/core.py": BANK_RIGHT,
}

# --- "rows": every bad row reported (the fix gathers them with an ExceptionGroup, then raises a ValueError) -----
ROWS_BROKEN = '''"""Rows."""


def check(rows):
    """Raises ValueError("N bad rows") naming how many rows are negative; returns the count of rows otherwise."""
    bad = [r for r in rows if r < 0][:1]  # bug: stops at the first
    if bad:
        raise ValueError(f"{len(bad)} bad rows")
    return len(rows)
'''
ROWS_RIGHT = '''"""Rows."""


def _each(rows):
    problems = [ValueError(f"row {i}: {r}") for i, r in enumerate(rows) if r < 0]
    if problems:
        raise ExceptionGroup("bad rows", problems)


def check(rows):
    """Raises ValueError("N bad rows") naming how many rows are negative; returns the count of rows otherwise."""
    try:
        _each(rows)
    except ExceptionGroup as group:
        raise ValueError(f"{len(group.exceptions)} bad rows") from group
    return len(rows)
'''
ROWS = {
    "task.json": _task_json("rows", "rows"),
    "repo/rows/__init__.py": "from rows.core import check\n",
    "repo/rows/core.py": ROWS_BROKEN,
    "repo/tests/test_rows.py": "from rows import check\n\n\ndef test_ok():\n    assert check([1, 2]) == 2\n",
    "hidden/tests/test_rows_hidden.py": """import pytest

from rows import check


def test_every_bad_row_is_counted():
    with pytest.raises(ValueError, match="2 bad rows"):
        check([-1, 2, -3])
""",
    "reference/rows/core.py": ROWS_RIGHT,
}

# --- "legacy": old() must warn DeprecationWarning at the caller's line (stacklevel=2) --------------------------
LEGACY_BROKEN = '''"""Old names."""
import warnings


def old():
    """Deprecated: warns DeprecationWarning pointing at the caller, returns 1."""
    warnings.warn("old() is deprecated", DeprecationWarning)  # bug: points at this file
    return 1
'''
LEGACY_RIGHT = LEGACY_BROKEN.replace(
    "DeprecationWarning)  # bug: points at this file", "DeprecationWarning, stacklevel=2)"
)
LEGACY = {
    "task.json": _task_json("legacy", "legacy"),
    "repo/legacy/__init__.py": "from legacy.core import old\n",
    "repo/legacy/core.py": LEGACY_BROKEN,
    "repo/tests/test_legacy.py": "from legacy import old\n\n\ndef test_old():\n    assert old() == 1\n",
    "hidden/tests/test_legacy_hidden.py": """import pytest

from legacy import old


def test_the_warning_points_at_the_caller():
    with pytest.warns(DeprecationWarning) as record:
        old()
    assert record[0].filename == __file__
""",
    "reference/legacy/core.py": LEGACY_RIGHT,
}

# --- "tracker": counts by an Enum status, the counts dict handed out ------------------------------------------
TRACKER_BROKEN = '''"""Order statuses."""
import enum


class Status(enum.Enum):
    OPEN = "open"
    SHIPPED = "shipped"


class Tracker:
    def __init__(self):
        self.counts = {}

    def by_status(self):
        return self.counts

    def add(self, status):
        key = Status(status)
        self.counts[key] = self.counts.get(key, 0)  # bug: never counts

    def total(self):
        return sum(self.counts.values())
'''
TRACKER_RIGHT = TRACKER_BROKEN.replace("self.counts.get(key, 0)  # bug: never counts", "self.counts.get(key, 0) + 1")
TRACKER = {
    "task.json": _task_json("tracker", "tracker"),
    "repo/tracker/__init__.py": "from tracker.core import Status, Tracker\n",
    "repo/tracker/core.py": TRACKER_BROKEN,
    "repo/tests/test_tracker.py": "from tracker import Tracker\n\n\ndef test_empty():\n"
    "    assert Tracker().total() == 0\n",
    "hidden/tests/test_tracker_hidden.py": """from tracker import Tracker


def test_counts():
    tracker = Tracker()
    counts = tracker.by_status()
    assert len(counts) == 0
    tracker.add("open")
    tracker.add("open")
    assert tracker.total() == 2 and len(counts) == 1
""",
    "reference/tracker/core.py": TRACKER_RIGHT,
}

TASKS = {"bank": BANK, "rows": ROWS, "legacy": LEGACY, "tracker": TRACKER}
WRONG = {"bank-abort-still-baseexception": ("bank", {"bank/core.py": BANK_WRONG})}
RIGHT = {
    "rows-exception-group-as-cause": ("rows", {"rows/core.py": ROWS_RIGHT}),
    "legacy-stacklevel-2": ("legacy", {"legacy/core.py": LEGACY_RIGHT}),
}


@pytest.fixture(scope="module")
def tasks() -> Iterator[dict[str, Task]]:
    base = Path(tempfile.mkdtemp(prefix="s27b-tasks-"))
    base.chmod(0o755)
    try:
        yield {name: kit.make_task(base / name, files) for name, files in TASKS.items()}
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_repair_is_not_resolved(tasks: dict[str, Task], name: str) -> None:
    """bank: the rebuilt lineage maps builtins.BaseException to RuntimeError (_errors.builtin_error), so the
    package's Abort(BaseException) is an Exception in the test process and pytest.raises(Exception) catches it."""
    task_name, files = WRONG[name]
    task = tasks[task_name]
    code, said = kit.plain_pytest(task, {k: v.encode() for k, v in files.items()})
    assert code == 1, said
    grade = kit.graded(task, files)
    assert not grade.resolved, kit.shown(grade, task)


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_a_correct_repair_is_resolved(tasks: dict[str, Task], name: str) -> None:
    """rows: an ExceptionGroup (here only the __cause__) cannot be rebuilt (_errors._exception: cls.__new__ needs
    its args) -> TypeError -> link dead -> "tampered". legacy: the warning is recorded in the package's process,
    where stacklevel=2 is servelab's loop ("<string>"), not the test. tracker: a shared dict that gains an Enum key
    fails every later answer."""
    task_name, files = RIGHT[name]
    task = tasks[task_name]
    code, said = kit.plain_pytest(task, {k: v.encode() for k, v in files.items()})
    assert code == 0, said
    grade = kit.graded(task, files)
    assert grade.resolved, kit.shown(grade, task)
    assert not grade.tampered, kit.shown(grade, task)
