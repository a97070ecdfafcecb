"""Attack s27b: correct packages (servelab's own, honest server loop) that plain pytest passes and servelab fails or
labels tampered. servelab's real server program in a plain subprocess, against the same package imported plainly.
Each `through servelab` case failed on cbc94b7 and holds since."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servelab.eval.repair._proxy import Link
from tests.unit.eval.test_repair_wire import WAYS, both_ways

PACKAGE = """
import enum


def validate(rows):
    problems = [ValueError(f"row {i}") for i, r in enumerate(rows) if r < 0]
    if problems:
        raise ExceptionGroup("invalid rows", problems)
    return len(rows)


def lookup(table, key):
    try:
        validate(table)
    except* ValueError:
        pass
    raise KeyError(key)


def wrapped(rows):
    try:
        validate(rows)
    except ExceptionGroup as group:
        raise ValueError("bad rows") from group
    return "ok"


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
        self.counts[key] = self.counts.get(key, 0) + 1

    def total(self):
        return sum(self.counts.values())


class Calc:
    def __init__(self):
        self.log = []

    def history(self):
        return self.log

    def power(self, base, exp):
        self.log.append(base ** exp)
        return len(str(self.log[-1])) if exp < 10_000 else "big"

    def ping(self):
        return "pong"
"""


@pytest.fixture(params=WAYS)
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Link | None]]:
    """(module, link or None)."""
    yield from both_ways(request.param, tmp_path, PACKAGE)


def test_an_exception_group_is_not_tampering(served: tuple[Any, Link | None]) -> None:
    """CLASS: the test side rebuilds a builtin class by calling it with the described args, then `cls.__new__(cls)`
    outside any guard; ExceptionGroup's args cannot be rebuilt (its exceptions go as text) and its __new__ needs
    them: TypeError, the link is marked dead ("an answer that is not plain data"), and the grader labels the
    attempt "tampered" (grader.py: final['link']) and fails every later test. Servelab's own honest loop sent it."""
    shop, link = served
    with pytest.raises(ExceptionGroup):
        shop.validate([1, -1])
    assert shop.validate([1, 2]) == 2  # the link still answers
    assert link is None or link.dead is None


def test_an_exception_group_as_context_is_not_tampering(served: tuple[Any, Link | None]) -> None:
    """Same class: the group is only the __cause__ of a plain ValueError the test expects."""
    shop, link = served
    with pytest.raises(ValueError, match="bad rows"):
        shop.wrapped([-1])
    assert link is None or link.dead is None


def test_a_shared_dict_that_gains_an_enum_key_does_not_break_every_call(served: tuple[Any, Link | None]) -> None:
    """CLASS: a dict is shared when it crosses with plain keys (empty, here); once the package puts a key the test
    process cannot hash (an Enum member) into it, every later answer's shared state fails to encode, and every call
    to the package raises TypeError('not plain data') for as long as the test holds the dict. In one process
    nothing fails."""
    shop, _ = served
    tracker = shop.Tracker()
    counts = tracker.by_status()
    assert len(counts) == 0
    tracker.add("open")
    tracker.add("shipped")
    assert tracker.total() == 2
