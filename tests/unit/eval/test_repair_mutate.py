"""The changed copies of hidden tests (servelab.eval.repair.mutate): which asserts they change, how, and that the
copy keeps what the test did before it."""

from __future__ import annotations

import ast
from pathlib import Path

from servelab.eval.repair.mutate import expectation_copies

SOURCE = """
from decimal import Decimal

from shop import Cart

RATE = 3


def helper():
    return Cart()


class Basket:
    size = 2


def test_total():
    cart = helper()
    cart.add("a", 2)
    assert cart.total() == Decimal("90.00")
    assert cart.count() == 2


def test_reversed_and_nested():
    assert {"a": [1, 2]} == helper().as_dict()


def test_against_a_name(expected=4):
    assert helper().count() == expected


def test_only_booleans():
    assert helper().empty() == True


class TestGrouped:
    def test_inside_a_class(self):
        assert helper().count() == 0
"""


def _copies(tmp_path: Path) -> tuple[ast.Module, list[str]]:
    path = tmp_path / "test_hidden.py"
    path.write_text(SOURCE)
    text, names = expectation_copies(path)
    return ast.parse(text), names


def test_only_a_call_compared_with_a_literal_holding_a_value_is_copied(tmp_path: Path) -> None:
    module, names = _copies(tmp_path)
    assert names == ["test_total", "test_reversed_and_nested"]  # a name, a bool, a class method: not copied
    kept = [ast.unparse(s) for s in module.body if not isinstance(s, ast.FunctionDef) or not s.name.startswith("t")]
    assert "RATE = 3" in kept and "from shop import Cart" in kept and any("def helper" in k for k in kept)
    assert any(k.startswith("class Basket") for k in kept)  # a helper class is kept, a Test class is not
    assert not any(k.startswith("class TestGrouped") for k in kept)


def test_the_copy_keeps_the_steps_before_the_assert_and_stops_there(tmp_path: Path) -> None:
    module, _ = _copies(tmp_path)
    total = next(s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "test_total")
    lines = [ast.unparse(s) for s in total.body]
    assert lines[:2] == ["cart = helper()", "cart.add('a', 2)"] and len(lines) == 3
    assert lines[2].startswith("assert cart.total() == Decimal('") and "90.00" not in lines[2]
    drawn = lines[2].split("Decimal('")[1].rstrip("')")
    assert drawn.endswith(".00") and int(drawn[:-3]) >= 10**9  # a numeric string stays a number


def test_every_constant_of_the_literal_is_drawn_anew_each_time(tmp_path: Path) -> None:
    first, second = _copies(tmp_path)[0], _copies(tmp_path)[0]

    def nested(module: ast.Module) -> str:
        func = next(s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "test_reversed_and_nested")
        return ast.unparse(func.body[-1])

    a, b = nested(first), nested(second)
    assert a != b and "'a'" not in a and "[1, 2]" not in a and a.endswith("== helper().as_dict()")


def test_a_file_with_nothing_to_change_gives_no_copy(tmp_path: Path) -> None:
    path = tmp_path / "test_plain.py"
    path.write_text("def test_x():\n    assert f() == y\n")
    assert expectation_copies(path) == ("", [])
    path.write_text("def broken(:\n")
    assert expectation_copies(path) == ("", [])
