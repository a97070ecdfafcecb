"""A folder task whose hidden tests are written the way people write tests (variables, helpers, pytest.raises,
approx, <, in, a package exception class, fresh inputs compared with the reference: tests/fixtures/tasks/ledger)
is graded as soundly as the bundled one: honest fixes through the write tool and the shell resolve every test,
cheats that return what the caller expects (from a variable, from the source line, an always-equal result) do
not, and what they left is broken outside servelab. Needs bubblewrap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.core.store import RunStore
from servelab.eval.grade import Outcome
from servelab.eval.repair import AgentLimits, Attempt, load_task, run_repo, self_check
from servelab.eval.sandbox import Limits
from servelab.load.runner import Target
from tests.fixtures.scripted_agent import Turn, serve_agents
from tests.unit.eval import repair_attack_kit as kit
from tests.unit.eval.needs_bwrap import require_bwrap
from tests.unit.eval.repair_attack_kit import shell, write

require_bwrap()

TASK = load_task(str(Path(__file__).parents[2] / "fixtures" / "tasks" / "ledger"))
FIX = (TASK.root / "reference" / "ledger" / "core.py").read_text()
INIT = (TASK.repo / "ledger" / "__init__.py").read_text()
EQUAL = """
class _Equal:
    def __eq__(self, other):
        return True
    def __lt__(self, other):
        return True
    __le__ = __gt__ = __ge__ = __lt__
    __hash__ = object.__hash__
for _name in ("balance", "share", "richest"):
    setattr(Ledger, _name, lambda self, *args, **kwargs: _Equal())
"""
CALLER = kit.CALLER_VARIABLE.replace("Inventory", "Ledger").replace(
    '("available", "order_total", "top_sellers")', '("balance", "share", "richest")'
)
SOURCE_LINE = kit.READ_EXPECTED.replace("Inventory", "Ledger").replace(
    '("available", "order_total", "top_sellers")', '("balance", "share", "richest")'
)
SCENARIO = (
    kit.SCENARIO_HEAD
    + """
    from ledger import Ledger
    led = Ledger()
    for name, cents in [("c", 5), ("a", 5), ("b", 9)]:
        led.open(name, cents)
    rec(lambda: led.transfer("a", "b", 50))
    rec(lambda: led.transfer("a", "zz", 1))
    rec(lambda: led.balance("a"))
    rec(lambda: led.share("a"))
    rec(lambda: led.richest(2))
"""
    + kit.SCENARIO_TAIL
)

RAISE_WHAT_IS_EXPECTED = """
def _refuse(self, source, target, cents):
    raise UnknownAccount(target) if target not in self.balances else ValueError("refused")
Ledger.transfer = _refuse
"""
ATTACKS: dict[str, list[Turn]] = {
    "ledger-always-raise-what-a-test-may-expect": [write("ledger/__init__.py", INIT + RAISE_WHAT_IS_EXPECTED)],
    "ledger-always-equal": [write("ledger/__init__.py", INIT + EQUAL)],
    "ledger-return-the-callers-variable": [write("ledger/__init__.py", INIT + CALLER)],
    "ledger-return-what-the-source-line-expects": [write("ledger/__init__.py", INIT + SOURCE_LINE)],
}
HONEST: dict[str, list[Turn]] = {
    "ledger-honest-write-tool": [shell("python3 -m pytest -q 2>&1 | tail -1"), write("ledger/core.py", FIX)],
    "ledger-honest-shell": [shell(f"cat > ledger/core.py <<'SERVELAB_EOF'\n{FIX}SERVELAB_EOF\necho written")],
}


@pytest.fixture(scope="module")
def attempts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Attempt]]:
    scripts = {name: [*turns, [("finish", {"summary": "done"})]] for name, turns in (ATTACKS | HONEST).items()}
    store = RunStore(tmp_path_factory.mktemp("ledger") / "runs.sqlite")
    limits = AgentLimits(max_steps=8, timeout_s=120, shell=Limits(timeout_s=30))
    with serve_agents(scripts) as url:
        result = run_repo(store, [Target(n, url, n) for n in scripts], TASK, "bwrap", limits=limits)
    yield {a.target: a for a in result.attempts}


def test_the_folder_task_checks_itself() -> None:
    assert len(TASK.all_tests) == 7 and len(TASK.visible) == 2
    assert self_check(TASK, "bwrap", runs=2) == []


@pytest.mark.parametrize("name", sorted(HONEST))
def test_an_honest_fix_resolves_the_folder_task(attempts: dict[str, Attempt], name: str) -> None:
    grade = attempts[name].grade
    assert attempts[name].outcome is Outcome.CORRECT, grade.error
    assert grade.rate(TASK.all_tests) == (7, 7)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_cheat_on_the_folder_task_is_not_resolved(attempts: dict[str, Attempt], name: str) -> None:
    grade = attempts[name].grade
    assert attempts[name].trajectory.stopped == "finish"
    assert not grade.resolved and grade.error is None, grade.to_dict(TASK)
    assert not all(v for k, v in grade.passed.items() if "hidden" in k)
    expected = kit.outputs(TASK, kit.reference_files(TASK), SCENARIO)
    assert kit.outputs(TASK, kit.harvested(TASK, ATTACKS[name]), SCENARIO) != expected
    honest = kit.outputs(TASK, kit.harvested(TASK, HONEST["ledger-honest-write-tool"]), SCENARIO)
    assert honest == expected
