"""The suites check themselves: answers recomputed, code items' tests pass a reference and fail a wrong one."""

from __future__ import annotations

import contextlib
import io
import itertools
import re

import pytest

from servelab.eval import load_items
from servelab.eval.code import grade_code
from servelab.eval.grade import Outcome
from servelab.eval.items import builtin_suites, load_suite
from servelab.eval.needle import needle_grid, needle_item
from servelab.eval.sandbox import Limits, bwrap_works


def test_suites_have_the_promised_shape() -> None:
    assert {"quick", "strict", "tools", "code"} <= set(builtin_suites())
    assert len(load_suite("quick")) == 6
    strict = load_suite("strict")
    assert len(strict) >= 28
    assert {"code-tracing", "combinatorics", "state-tracking"} <= {i.category for i in strict}
    assert {i.kind for i in strict} == {"integer", "json", "word"}
    ids = [(i.suite, i.id) for i in load_items(["quick", "strict", "tools", "code"])]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("item", [i for i in load_suite("strict") if i.category == "code-tracing"], ids=str)
def test_code_tracing_answers_are_what_python_prints(item) -> None:  # type: ignore[no-untyped-def]
    program = re.search(r"```python\n(.*?)```", item.prompt, re.S).group(1)  # type: ignore[union-attr]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(program, {})
    assert int(out.getvalue().strip()) == item.answer


def test_combinatorics_answers_by_brute_force() -> None:
    want = {i.id: i.answer for i in load_suite("strict")}
    assert want["choose-3-of-7"] == len(list(itertools.combinations(range(7), 3)))
    assert want["level-anagrams"] == len(set(itertools.permutations("LEVEL")))
    assert want["distinct-digits"] == sum(len(set(str(n))) == 3 for n in range(100, 1000))
    assert want["subsets-6"] == sum(1 for r in range(7) for _ in itertools.combinations(range(6), r))
    assert want["books-5"] == len(list(itertools.permutations(range(5))))
    octagon = [(a, b) for a, b in itertools.combinations(range(8), 2) if (b - a) % 8 not in (1, 7)]
    assert want["octagon-diagonals"] == len(octagon)
    assert want["stars-bars"] == sum(1 for x in range(6) for y in range(6) if x + y <= 5)
    assert want["divisors-360"] == sum(360 % d == 0 for d in range(1, 361))


def test_state_tracking_answers_by_simulation() -> None:
    want = {i.id: i.answer for i in load_suite("strict")}
    facing = 0  # north, clockwise quarter turns
    for turn in (1, 1, -1, 2):
        facing = (facing + turn) % 4
    assert want["compass"] == ["north", "east", "south", "west"][facing]
    cups = {"A": True, "B": False, "C": False}
    for x, y in (("A", "B"), ("B", "C"), ("A", "C")):
        cups[x], cups[y] = cups[y], cups[x]
    assert want["cups"] == next(c for c, ball in cups.items() if ball)
    assert want["counter"] == (10 * 2 - 4) // 2 + 7
    assert want["elevator"] == 3 + 5 - 2 + 4 - 7
    assert want["balls"] == 5 + 3 - 2 + 4 - 1


REFERENCE = {
    "palindrome": "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
    "fizzbuzz": "def fizzbuzz(n):\n    return ['FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' "
    "if i % 5 == 0 else str(i) for i in range(1, n + 1)]\n",
    "merge-intervals": "def merge_intervals(iv):\n    out = []\n    for a, b in sorted(iv):\n"
    "        if out and a <= out[-1][1]:\n            out[-1] = (out[-1][0], max(out[-1][1], b))\n"
    "        else:\n            out.append((a, b))\n    return out\n",
}


@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap (make test installs it)")
@pytest.mark.parametrize("item", load_suite("code"), ids=str)
def test_code_items_pass_a_reference_and_fail_a_wrong_answer(item) -> None:  # type: ignore[no-untyped-def]
    limits = Limits(timeout_s=20)
    reference = REFERENCE[item.id]
    assert grade_code(item, f"```python\n{reference}```", "bwrap", limits).outcome is Outcome.CORRECT
    in_prose = f"Here it is:\n```python\n{reference}```\nIt runs in linear time."
    assert grade_code(item, in_prose, "bwrap", limits).outcome is Outcome.FORMAT_VIOLATION
    name = re.search(r"def (\w+)", reference).group(1)  # type: ignore[union-attr]
    assert grade_code(item, f"def {name}(*a):\n    return None\n", "bwrap", limits).outcome is Outcome.WRONG
    hang = f"def {name}(*a):\n    while True:\n        pass\n"
    assert grade_code(item, hang, "bwrap", Limits(timeout_s=2)).outcome is Outcome.TIMEOUT


def test_needle_is_seeded_unique_and_at_its_depth() -> None:
    first, again = needle_item(2000, 0.5, seed=3), needle_item(2000, 0.5, seed=3)
    assert first == again
    lines = [ln for ln in first.prompt.splitlines() if ln.startswith("Record ")]
    holder = [i for i, ln in enumerate(lines) if "Zelda Quarrington" in ln]
    assert len(holder) == 1 and abs(holder[0] / (len(lines) - 1) - 0.5) < 0.01
    assert first.prompt.count(first.answer) == 1
    assert f"id={first.answer};" in lines[holder[0]]
    assert needle_item(2000, 0.0).prompt != needle_item(2000, 1.0).prompt
    grid = needle_grid([1000, 4000], [0.0, 1.0])
    assert [i.id for i in grid] == ["needle-1000-d0", "needle-1000-d1", "needle-4000-d0", "needle-4000-d1"]
    assert grid[2].meta["records"] == 4000 // 30
