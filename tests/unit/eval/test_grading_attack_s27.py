"""Round s27 against the repo-repair grader, end to end: small folder tasks graded by servelab's real
``grade_workdir`` under bubblewrap (harvest, three sandboxes, wire, verdict), each compared with what plain pytest
says of the very same files outside servelab. Every test here asserts the right grade; each case was a finding
against the grader of session 26 (the docstrings name the class each belonged to and what now holds it: lists
shared, exception classes rebuilt as a graph with their attributes and text, prints and warnings carried, a dict
keyed by package objects kept there, bytes bound by the message alone). Needs bubblewrap."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servelab.eval.repair import Task
from servelab.eval.repair.grader import RepoGrade
from tests.unit.eval import repair_attack_kit as kit
from tests.unit.eval.needs_bwrap import require_bwrap

require_bwrap()


def _task_json(name: str, package: str) -> str:
    return json.dumps({"name": name, "instructions": f"Fix {package}/. Do not change the tests.", "tests_dir": "tests",
                       "editable": [package]})  # fmt: skip


# --- task "ranking": the package must not change its argument, print, or warn ---------------------------------
RANKING_BROKEN = '''"""Scores."""
import warnings


def top(scores, n):
    """The n highest of ``scores``, highest first. ``scores`` is the caller's: leave it as it is."""
    scores.sort(reverse=True)
    return scores[:n]


def total(prices):
    """The sum of ``prices``. Prints nothing and warns nothing."""
    print("DEBUG total", prices)
    warnings.warn("total() is slow", DeprecationWarning)
    return sum(prices) + 1
'''
# the "wrong repair": fixes only what the visible tests see (the +1); still sorts the caller's list in place,
# still prints, still warns
RANKING_WRONG = RANKING_BROKEN.replace("sum(prices) + 1", "sum(prices)")
# the same, with the argument left alone: only the print and the warning stay (independent of argument aliasing)
RANKING_WRONG_LOUD = RANKING_WRONG.replace(
    "    scores.sort(reverse=True)\n    return scores[:n]", "    return sorted(scores, reverse=True)[:n]"
)
RANKING_RIGHT = '''"""Scores."""


def top(scores, n):
    """The n highest of ``scores``, highest first. ``scores`` is the caller's: leave it as it is."""
    return sorted(scores, reverse=True)[:n]


def total(prices):
    """The sum of ``prices``. Prints nothing and warns nothing."""
    return sum(prices)
'''
RANKING = {
    "task.json": _task_json("ranking", "ranking"),
    "repo/ranking/__init__.py": "from ranking.core import top, total\n",
    "repo/ranking/core.py": RANKING_BROKEN,
    "repo/tests/test_ranking.py": """from ranking import top, total


def test_top_two():
    assert top([3, 9, 1], 2) == [9, 3]


def test_total():
    assert total([1, 2]) == 3
""",
    "hidden/tests/test_ranking_hidden.py": """import warnings

from ranking import top, total


def test_top_leaves_its_argument_alone():
    scores = [3, 9, 1]
    assert top(scores, 2) == [9, 3]
    assert scores == [3, 9, 1]


def test_total_prints_nothing(capsys):
    assert total([1, 2]) == 3
    assert capsys.readouterr().out == ""


def test_total_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert total([1, 2]) == 3
""",
    "reference/ranking/core.py": RANKING_RIGHT,
}

# --- task "stock": exceptions the docs promise -----------------------------------------------------------------
STOCK_BROKEN = '''"""A stock room."""


class StockError(Exception):
    """Every error of this package."""


class OutOfStock(StockError, LookupError):
    """More asked than there is: ``.sku``, ``.available``; the message is "SKU: only N left"."""

    def __init__(self, sku, available):
        super().__init__(sku, available)
        self.sku, self.available = sku, available

    def __str__(self):
        return f"{self.sku}: only {self.available} left"


class BadQuantity(StockError, ValueError):
    """A quantity that is not positive (a ValueError)."""


class UnknownSku(StockError):
    """A SKU the room does not stock. Must be a LookupError (callers catch LookupError)."""


class Room:
    def __init__(self):
        self.levels = {"apple": 2}

    def take(self, sku, qty):
        if qty <= 0:
            raise BadQuantity(qty)
        if sku not in self.levels:
            raise UnknownSku(sku)
        if qty > self.levels[sku]:
            raise OutOfStock(sku, self.levels[sku])
        self.levels[sku] -= qty
        return self.levels[sku]
'''
# the wrong repair: changes nothing (UnknownSku is still no LookupError)
STOCK_RIGHT = STOCK_BROKEN.replace("class UnknownSku(StockError):", "class UnknownSku(StockError, LookupError):")
STOCK_VISIBLE = """import pytest

import stock


def test_take():
    assert stock.Room().take("apple", 1) == 1


def test_out_of_stock():
    with pytest.raises(stock.OutOfStock):
        stock.Room().take("apple", 5)
"""


def _stock(name: str, hidden: str) -> dict[str, str]:
    return {
        "task.json": _task_json(name, "stock"),
        "repo/stock/__init__.py": "from stock.core import *\n",
        "repo/stock/core.py": STOCK_BROKEN,
        "repo/tests/test_stock.py": STOCK_VISIBLE,
        "hidden/tests/test_stock_hidden.py": hidden,
        "reference/stock/core.py": STOCK_RIGHT,
    }


STOCK_LOOKUP = _stock(
    "stock-lookup",
    """import pytest

import stock


def test_an_unknown_sku_is_a_lookup_error():
    with pytest.raises(LookupError):
        stock.Room().take("durian", 1)
""",
)
STOCK_DETAILS = _stock(
    "stock-details",
    """import pytest

import stock


def test_a_bad_quantity_is_a_value_error():
    with pytest.raises(ValueError):
        stock.Room().take("apple", 0)


def test_out_of_stock_says_what_is_left():
    with pytest.raises(stock.OutOfStock, match="apple: only 2 left") as caught:
        stock.Room().take("apple", 5)
    assert caught.value.available == 2
""",
)

# --- task "orders": correct results that the test process refuses as "not plain data" ------------------------
ORDERS_BROKEN = '''"""Orders."""
import enum


class Status(enum.Enum):
    OPEN = "open"
    SHIPPED = "shipped"


def by_status(orders):
    """How many orders have each status: {Status: count}."""
    counts = {}
    for status in orders:
        counts[status] = counts.get(status, 0)  # bug: never counts
    return counts


def export(rows):
    """CSV bytes: a header line "sku,qty", then one line per (sku, qty)."""
    return "".join(f"{sku},{qty}\\n" for sku, qty in rows).encode()  # bug: no header
'''
ORDERS_RIGHT = '''"""Orders."""
import enum


class Status(enum.Enum):
    OPEN = "open"
    SHIPPED = "shipped"


def by_status(orders):
    """How many orders have each status: {Status: count}."""
    counts = {}
    for status in orders:
        counts[status] = counts.get(status, 0) + 1
    return counts


def export(rows):
    """CSV bytes: a header line "sku,qty", then one line per (sku, qty)."""
    return ("sku,qty\\n" + "".join(f"{sku},{qty}\\n" for sku, qty in rows)).encode()
'''
ORDERS_BASE = {
    "task.json": _task_json("orders", "orders"),
    "repo/orders/__init__.py": "from orders.core import Status, by_status, export\n",
    "repo/orders/core.py": ORDERS_BROKEN,
    "repo/tests/test_orders.py": """from orders import export


def test_export_small():
    assert export([("a", 1)]) == b"sku,qty\\na,1\\n"
""",
    "reference/orders/core.py": ORDERS_RIGHT,
}
ORDERS_STATUS = ORDERS_BASE | {
    "hidden/tests/test_orders_hidden.py": """from orders import Status, by_status


def test_counts_by_status():
    counts = by_status([Status.OPEN, Status.SHIPPED, Status.OPEN])
    assert sorted(counts.values()) == [1, 2] and len(counts) == 2
"""
}
ORDERS_EXPORT = ORDERS_BASE | {
    "hidden/tests/test_orders_hidden.py": """from orders import export


def test_export_a_big_day():
    data = export([(f"sku{i}", i) for i in range(4000)])
    assert data.startswith(b"sku,qty\\n") and data.count(b"\\n") == 4001
"""
}

# --- task "cli": a command line entry point ---------------------------------------------------------------------
CLI_BROKEN = '''"""A tiny command line."""
import sys


def main(argv):
    """``--version`` prints "shop 1.0"; anything else exits with status 2."""
    if argv == ["--version"]:
        print("shop 1.0")
        return 0
    return 2  # bug: must exit with status 2
'''
CLI_RIGHT = CLI_BROKEN.replace("    return 2  # bug: must exit with status 2", "    sys.exit(2)")
CLI = {
    "task.json": _task_json("cli", "shopcli"),
    "repo/shopcli/__init__.py": "from shopcli.core import main\n",
    "repo/shopcli/core.py": CLI_BROKEN,
    "repo/tests/test_cli.py": """from shopcli import main


def test_version_returns_zero():
    assert main(["--version"]) == 0
""",
    "hidden/tests/test_cli_hidden.py": """import pytest

from shopcli import main


def test_version_is_printed(capsys):
    main(["--version"])
    assert capsys.readouterr().out == "shop 1.0\\n"


def test_a_bad_flag_exits_with_two():
    with pytest.raises(SystemExit) as caught:
        main(["--bad"])
    assert caught.value.code == 2
""",
    "reference/shopcli/core.py": CLI_RIGHT,
}

TASKS = {"ranking": RANKING, "stock-lookup": STOCK_LOOKUP, "stock-details": STOCK_DETAILS,
         "orders-status": ORDERS_STATUS, "orders-export": ORDERS_EXPORT, "cli": CLI}  # fmt: skip
# case -> (task, files the agent leaves, what the task's tests really say of them)
WRONG = {
    "ranking-mutates-prints-warns": ("ranking", {"ranking/core.py": RANKING_WRONG}),
    "ranking-prints-warns": ("ranking", {"ranking/core.py": RANKING_WRONG_LOUD}),
    "stock-unknown-sku-not-lookup": ("stock-lookup", {}),
}
RIGHT = {
    "ranking-honest": ("ranking", {"ranking/core.py": RANKING_RIGHT}),
    "stock-details-honest": ("stock-details", {"stock/core.py": STOCK_RIGHT}),
    "orders-status-honest": ("orders-status", {"orders/core.py": ORDERS_RIGHT}),
    "orders-export-honest": ("orders-export", {"orders/core.py": ORDERS_RIGHT}),
    "cli-honest": ("cli", {"shopcli/core.py": CLI_RIGHT}),
}


@pytest.fixture(scope="module")
def tasks() -> Iterator[dict[str, Task]]:
    base = Path(tempfile.mkdtemp(prefix="s27-tasks-"))
    base.chmod(0o755)
    try:
        yield {name: kit.make_task(base / name, files) for name, files in TASKS.items()}
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def grades(tasks: dict[str, Task]) -> dict[str, tuple[RepoGrade, int, str]]:
    out = {}
    for name, (task_name, files) in (WRONG | RIGHT).items():
        task = tasks[task_name]
        out[name] = (kit.graded(task, files), *kit.plain_pytest(task, {k: v.encode() for k, v in files.items()}))
    return out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_repair_is_not_resolved(tasks: dict[str, Task], grades: dict[str, Any], name: str) -> None:
    """Found in s27, held since (the test asserts the right grade).

    ranking-mutates-prints-warns: the package's effects on the test's own objects and on process-wide channels
    (the argument list it sorts in place, stdout, warnings) happen in another process: servelab hands the package a
    COPY of each argument (_proxy._send / _wire.encode, decoded anew in _serve.answer) and captures the test
    process's stdout/warnings, so "leaves its argument alone", "prints nothing" and "warns nothing" pass whatever
    the package does. stock-unknown-sku-not-lookup: the test process rebuilds the package's exception classes by
    (module, qualname) from a linearized MRO (_proxy.Link.exception_class), first lineage wins: OutOfStock(StockError,
    LookupError) crossing first makes StockError a LookupError there, so UnknownSku(StockError), no LookupError in
    Python, is caught by pytest.raises(LookupError)."""
    task = tasks[WRONG[name][0]]
    grade, code, said = grades[name]
    assert code == 1, said  # what the tests really say: failed
    assert not grade.resolved, kit.shown(grade, task)


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_a_correct_repair_is_resolved(tasks: dict[str, Task], grades: dict[str, Any], name: str) -> None:
    """Found in s27, held since (the test asserts the right grade).

    stock-details-honest: exception attributes and __str__ are dropped (only args cross, _serve.reply) and the
    rebuilt hierarchy makes BadQuantity(StockError, ValueError) no ValueError once StockError was bound under
    LookupError. orders-honest: an honest answer the test process refuses as "not plain data" (a dict keyed by
    Enum members: the key is a handle, unhashable in decode; bytes over 32 KiB: _wire.MAX_TEXT applies to the hex
    text) is graded TAMPERED. cli-honest: SystemExit is turned into RuntimeError (_proxy._builtin_error) and what
    the package prints never reaches capsys."""
    task = tasks[RIGHT[name][0]]
    grade, code, said = grades[name]
    assert code == 0, said  # what the tests really say: passed
    assert grade.resolved, kit.shown(grade, task)
    assert not grade.tampered
