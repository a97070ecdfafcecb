"""Round s26 against the repo-repair grader: what the package's process answers with a handle (an object that is
not exactly one of the wire's plain types) is compared in the test process by handle identity, not as the value
it is. So the same agent code gets another verdict from servelab than from the task's tests run plainly:

- a wrong repair that leaves the bug in but returns its results as an ``int`` subclass or a frozen dataclass is
  graded resolved: every handle is "different" from every other, so ``!=``, ``not in`` and ``len(set(...))``
  hold whatever the values are (``Remote.__eq__``/``__hash__``, src/servelab/eval/repair/_proxy.py:190-194);
- a correct repair that returns a ``collections.Counter`` or a ``defaultdict`` (both dicts, as the docstring asks)
  is graded failed: ``_wire.encode`` sends only exact ``dict`` as a dict (src/servelab/eval/repair/_wire.py:63),
  so the result is a handle and ``== {...}`` is False in the test process while it is True in plain Python;
- an agent that changes nothing is graded resolved where a test checks identity (``copy() is not cart``): each
  answer naming a package object becomes a new stand-in, so the package's one object is two objects in the test
  (``Link._ref``, src/servelab/eval/repair/_proxy.py:95).

Each case is a small folder task (written here the way docs/repair-grading.md says tests may be written: any
comparison) played end to end by scripted agents through servelab's real agent loop, tools, harvest and grading
(``run_repo``); the same harvested files are then run under plain pytest, outside servelab, to show what the
tests really say of them. Needs bubblewrap."""

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

# --- task 1: ticket numbers that must all differ -------------------------------------------------------------
TICKETS = {
    "task.json": json.dumps(
        {
            "name": "tickets",
            "instructions": "The package tickets/ has a bug: Desk.issue must hand out a number never handed out "
            "before. Fix it. Do not change the tests. Call finish when you are done.",
            "tests_dir": "tests",
            "editable": ["tickets"],
            "broken_fails": [
                "tests/test_tickets.py::test_two_tickets_differ",
                "tests/test_tickets_hidden.py::test_fifty_tickets_are_all_different",
                "tests/test_tickets_hidden.py::test_a_new_ticket_was_never_seen",
            ],
        }
    ),
    "repo/tickets/__init__.py": '"""Ticket numbers."""\n\nfrom tickets.core import Desk\n\n__all__ = ["Desk"]\n',
    "repo/tickets/core.py": '''"""A desk that hands out ticket numbers."""


class Desk:
    def __init__(self) -> None:
        self.last = 0

    def issue(self) -> int:
        """A ticket number this desk never handed out before."""
        return self.last + 1
''',
    "reference/tickets/core.py": '''"""A desk that hands out ticket numbers."""


class Desk:
    def __init__(self) -> None:
        self.last = 0

    def issue(self) -> int:
        """A ticket number this desk never handed out before."""
        self.last += 1
        return self.last
''',
    "repo/tests/test_tickets.py": """from tickets import Desk


def test_two_tickets_differ() -> None:
    desk = Desk()
    first = desk.issue()
    assert desk.issue() != first
""",
    "hidden/tests/test_tickets_hidden.py": """from tickets import Desk


def test_fifty_tickets_are_all_different() -> None:
    desk = Desk()
    tickets = [desk.issue() for _ in range(50)]
    assert len(set(tickets)) == 50


def test_a_new_ticket_was_never_seen() -> None:
    desk = Desk()
    seen = {desk.issue() for _ in range(5)}
    assert desk.issue() not in seen
""",
}
# the bug stays (every ticket is number 1); only the type of the result changes
TICKET_INT_SUBCLASS = '''"""A desk that hands out ticket numbers."""


class Ticket(int):
    """A ticket number."""


class Desk:
    def __init__(self) -> None:
        self.last = 0

    def issue(self) -> Ticket:
        """A ticket number this desk never handed out before."""
        return Ticket(self.last + 1)
'''
TICKET_VALUE_OBJECT = '''"""A desk that hands out ticket numbers."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Ticket:
    number: int


class Desk:
    def __init__(self) -> None:
        self.last = 0

    def issue(self) -> Ticket:
        """A ticket number this desk never handed out before."""
        return Ticket(self.last + 1)
'''

# --- task 2: word counts, a dict -----------------------------------------------------------------------------
TALLY = {
    "task.json": json.dumps(
        {
            "name": "tally",
            "instructions": "The package tally/ has a bug: count_words must ignore case. Fix it. Do not change the "
            "tests. Call finish when you are done.",
            "tests_dir": "tests",
            "editable": ["tally"],
            "broken_fails": ["tests/test_tally_hidden.py::test_case_is_ignored"],
        }
    ),
    "repo/tally/__init__.py": '"""Word counts."""\n\nfrom tally.core import count_words\n\n__all__ = ["count_words"]\n',
    "repo/tally/core.py": '''"""Word counts."""


def count_words(text: str) -> dict[str, int]:
    """How many times each word of text occurs, ignoring case: a dict of lowercase word -> count."""
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
''',
    "reference/tally/core.py": '''"""Word counts."""


def count_words(text: str) -> dict[str, int]:
    """How many times each word of text occurs, ignoring case: a dict of lowercase word -> count."""
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return counts
''',
    "repo/tests/test_tally.py": """from tally import count_words


def test_counts() -> None:
    assert count_words("a b a") == {"a": 2, "b": 1}
""",
    "hidden/tests/test_tally_hidden.py": """from tally import count_words


def test_case_is_ignored() -> None:
    assert count_words("The cat saw the CAT") == {"the": 2, "cat": 2, "saw": 1}


def test_empty_text() -> None:
    assert count_words("") == {}
""",
}
TALLY_COUNTER = '''"""Word counts."""

from collections import Counter


def count_words(text: str) -> dict[str, int]:
    """How many times each word of text occurs, ignoring case: a dict of lowercase word -> count."""
    return Counter(text.lower().split())
'''
TALLY_DEFAULTDICT = '''"""Word counts."""

from collections import defaultdict


def count_words(text: str) -> dict[str, int]:
    """How many times each word of text occurs, ignoring case: a dict of lowercase word -> count."""
    counts: defaultdict[str, int] = defaultdict(int)
    for word in text.lower().split():
        counts[word] += 1
    return counts
'''

# --- task 3: a copy that must be a new object -----------------------------------------------------------------
CART = {
    "task.json": json.dumps(
        {
            "name": "cart",
            "instructions": "The package cart/ has a bug: Cart.copy must return a new cart. Fix it. Do not change the "
            "tests. Call finish when you are done.",
            "tests_dir": "tests",
            "editable": ["cart"],
            "broken_fails": ["tests/test_cart_hidden.py::test_a_copy_is_a_new_cart"],
        }
    ),
    "repo/cart/__init__.py": '"""A shopping cart."""\n\nfrom cart.core import Cart\n\n__all__ = ["Cart"]\n',
    "repo/cart/core.py": '''"""A shopping cart."""


class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, item: str) -> None:
        self.items.append(item)

    def copy(self) -> "Cart":
        """A new cart (not this one) holding the same items."""
        return self
''',
    "reference/cart/core.py": '''"""A shopping cart."""


class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, item: str) -> None:
        self.items.append(item)

    def copy(self) -> "Cart":
        """A new cart (not this one) holding the same items."""
        new = Cart()
        new.items = list(self.items)
        return new
''',
    "repo/tests/test_cart.py": """from cart import Cart


def test_a_copy_has_the_same_items() -> None:
    cart = Cart()
    cart.add("apple")
    assert cart.copy().items == ["apple"]
""",
    "hidden/tests/test_cart_hidden.py": """from cart import Cart


def test_a_copy_is_a_new_cart() -> None:
    cart = Cart()
    assert cart.copy() is not cart
""",
}

WRONG: dict[str, tuple[str, list[Turn]]] = {  # name -> (task, turns): the bug left in
    "ticket-int-subclass": ("tickets", [write("tickets/core.py", TICKET_INT_SUBCLASS)]),
    "ticket-frozen-dataclass": ("tickets", [write("tickets/core.py", TICKET_VALUE_OBJECT)]),
}
UNCHANGED: dict[str, tuple[str, list[Turn]]] = {  # name -> (task, turns): an agent that changes nothing
    "cart-untouched": ("cart", [[("read_file", {"path": "cart/core.py"})]]),
}
CORRECT: dict[str, tuple[str, list[Turn]]] = {  # name -> (task, turns): a correct fix
    "tally-counter": ("tally", [write("tally/core.py", TALLY_COUNTER)]),
    "tally-defaultdict": ("tally", [write("tally/core.py", TALLY_DEFAULTDICT)]),
}
CONTROLS: dict[str, tuple[str, list[Turn]]] = {  # the reference's own fix, written by an agent: resolves today
    "tickets-honest": ("tickets", [write("tickets/core.py", TICKETS["reference/tickets/core.py"])]),
    "tally-honest": ("tally", [write("tally/core.py", TALLY["reference/tally/core.py"])]),
    "cart-honest": ("cart", [write("cart/core.py", CART["reference/cart/core.py"])]),
}


@pytest.fixture(scope="module")
def tasks() -> Iterator[dict[str, Task]]:
    base = Path(tempfile.mkdtemp(prefix="s26-tasks-"))
    base.chmod(0o755)
    try:
        yield {
            name: kit.make_task(base / name, files)
            for name, files in (("tickets", TICKETS), ("tally", TALLY), ("cart", CART))
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def attempts(tasks: dict[str, Task], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Attempt]:
    """Every scripted agent of this file, through servelab's own eval (agent loop, tools, harvest, grading)."""
    everything = WRONG | UNCHANGED | CORRECT | CONTROLS
    out: dict[str, Attempt] = {}
    limits = AgentLimits(max_steps=6, timeout_s=120, shell=Limits(timeout_s=30))
    for task_name, task in tasks.items():
        scripts = {n: [*turns, [("finish", {"summary": "done"})]] for n, (t, turns) in everything.items()
                   if t == task_name}  # fmt: skip
        store = RunStore(tmp_path_factory.mktemp(f"s26-{task_name}") / "runs.sqlite")
        with serve_agents(scripts) as url:
            result = run_repo(store, [Target(n, url, n) for n in scripts], task, "bwrap", limits=limits)
        out |= {a.target: a for a in result.attempts}
    return out


def _files(task: Task, turns: list[Turn]) -> dict[str, bytes]:
    return kit.harvested(task, turns)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_control_the_reference_fix_resolves_and_passes_plainly(
    tasks: dict[str, Task], attempts: dict[str, Attempt], name: str
) -> None:
    """Not a finding: the harness works (the honest fix resolves, plain pytest agrees, the broken repo fails)."""
    task_name, turns = CONTROLS[name]
    task = tasks[task_name]
    assert kit.plain_pytest(task, _files(task, turns))[0] == 0
    assert kit.plain_pytest(task, {})[0] == 1
    assert attempts[name].outcome is Outcome.CORRECT, attempts[name].grade.to_dict(task)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_repair_returned_as_a_handle_is_not_resolved(
    tasks: dict[str, Task], attempts: dict[str, Attempt], name: str
) -> None:
    """Class: a handle is unequal to everything but itself. The agent leaves the bug (every ticket is number 1) and
    only returns the number as an ``int`` subclass (or a frozen dataclass). ``_wire.encode`` sends anything but
    the exact plain types as a handle (src/servelab/eval/repair/_wire.py:71, ``return other(value)``), and the test
    process compares handles by handle number (``Remote.__eq__``/``__hash__``,
    src/servelab/eval/repair/_proxy.py:190-194): two tickets with the same number are two handles, so ``!=``,
    ``not in`` and ``len(set(...))`` hold and the grade is resolved, while plain pytest fails all three tests."""
    task_name, turns = WRONG[name]
    task = tasks[task_name]
    code, said = kit.plain_pytest(task, _files(task, turns))
    assert code == 1 and "3 failed" in said, said  # what the tests really say: the bug is still there
    grade = attempts[name].grade
    assert not grade.resolved, grade.to_dict(task)
    assert attempts[name].outcome is not Outcome.CORRECT


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_a_correct_repair_returning_a_dict_subclass_is_resolved(
    tasks: dict[str, Task], attempts: dict[str, Attempt], name: str
) -> None:
    """Class: a correct result of a subclass of a plain type is failed. The docstring asks for a dict and the agent
    returns a ``Counter`` (or a ``defaultdict``): a dict, equal to the expected dict in plain Python, so plain
    pytest passes every test. ``_wire.encode`` sends only an exact ``dict`` as a dict
    (src/servelab/eval/repair/_wire.py:63, ``if kind is dict``); the Counter goes as a handle, and a handle
    compared with the test's dict is False (src/servelab/eval/repair/_proxy.py:190), so servelab grades the
    correct repair wrong."""
    task_name, turns = CORRECT[name]
    task = tasks[task_name]
    code, said = kit.plain_pytest(task, _files(task, turns))
    assert code == 0, said  # what the tests really say: a correct fix
    grade = attempts[name].grade
    assert attempts[name].outcome is Outcome.CORRECT, grade.to_dict(task)


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_an_untouched_broken_repo_is_not_resolved_by_identity(
    tasks: dict[str, Task], attempts: dict[str, Attempt], name: str
) -> None:
    """Class: object identity is not kept across the wire. The agent changes nothing: ``Cart.copy`` still returns
    the cart itself. Every answer that is a handle becomes a new ``Remote`` instance in the test process
    (``Link._ref``, src/servelab/eval/repair/_proxy.py:95, ``return Remote(self, tag["id"], ...)``), so
    ``cart.copy() is not cart`` is True although both name the one object of the package (handle 0): the broken
    repo is graded resolved, while plain pytest fails the hidden test."""
    task_name, turns = UNCHANGED[name]
    task = tasks[task_name]
    code, said = kit.plain_pytest(task, _files(task, turns))
    assert code == 1 and "1 failed" in said, said  # what the tests really say: the bug is still there
    grade = attempts[name].grade
    assert not grade.resolved, grade.to_dict(task)
    assert attempts[name].outcome is not Outcome.CORRECT
