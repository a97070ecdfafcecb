"""Copies of hidden tests with their expected values changed: canaries that code reading the test cannot pass.

Code under test runs in pytest's process and can read its caller: the frame, its source line, the literal on the
other side of ``==``, and return that. It then passes every test whatever it computes, and the must-fail canary
(which does not call it) cannot tell. So each grading also runs a copy of every hidden test that has one
``assert CALL == LITERAL`` (either order), under the test's own name in a file of a new name, cut at that assert
with every constant in the literal drawn anew: no honest code returns the new value, so each copy must fail; one
that passes read what it was compared with.
Numbers stay numbers (and numeric strings numeric, so ``Decimal("90.00")`` still builds); booleans and None are
left alone, and an assert whose literal holds nothing to change is not used.
"""

from __future__ import annotations

import ast
import re
import secrets
from pathlib import Path

MAX_COPIES = 50
BUILTIN_TYPES = {"frozenset", "set", "tuple", "list", "dict", "complex", "float", "int", "str", "bytes"}
_NUMERIC = re.compile(r"-?\d+(\.\d+)?")


def expectation_copies(hidden: Path, limit: int = MAX_COPIES) -> tuple[str, list[str]]:
    """A module to put beside the hidden test file ``hidden``: its imports and helpers, and a changed copy of each
    of its tests (up to ``limit``) that compares a call with a literal; ("", []) when none does."""
    try:
        module = ast.parse(hidden.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError):
        return "", []
    tests = [f for f in module.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and _is_test(f)]
    copies = [c for f in tests if (c := _changed_copy(f)) is not None][:limit]
    if not copies:
        return "", []
    body = [s for s in module.body if not _is_test(s) and not _is_test_class(s)] + copies
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))) + "\n", [
        c.name for c in copies
    ]


def _is_test_class(node: ast.stmt) -> bool:
    """A class pytest collects (its tests are not copied); a helper class the tests use is kept."""
    return isinstance(node, ast.ClassDef) and node.name.startswith("Test")


def _is_test(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")


def _changed_copy(func: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for i, stmt in enumerate(func.body):
        if isinstance(stmt, ast.Assert) and (test := _changed_compare(stmt.test)) is not None:
            copy = ast.parse(ast.unparse(func)).body[0]
            assert isinstance(copy, ast.FunctionDef | ast.AsyncFunctionDef)
            copy.body = [*copy.body[:i], ast.Assert(test=test, msg=None)]
            return copy
    return None


def _changed_compare(node: ast.expr) -> ast.Compare | None:
    """``CALL == LITERAL`` (or the other way round) with the literal's constants drawn anew; None otherwise."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
        return None
    left, right = node.left, node.comparators[0]
    for side, other in ((right, left), (left, right)):
        if _literal(side) and not _literal(other) and _has_call(other):
            changed = _Redraw().visit(ast.parse(ast.unparse(side), mode="eval").body)
            if ast.unparse(changed) != ast.unparse(side):
                pair = (ast.parse(ast.unparse(other), mode="eval").body, changed)
                first, second = pair if side is right else pair[::-1]
                return ast.Compare(left=first, ops=[ast.Eq()], comparators=[second])
    return None


def _literal(node: ast.expr) -> bool:
    """Constants, containers of them, a sign, or a constructor called on them (``Decimal("1.01")``)."""
    match node:
        case ast.Constant():
            return True
        case ast.List(elts=items) | ast.Tuple(elts=items) | ast.Set(elts=items):
            return all(_literal(i) for i in items)
        case ast.Dict(keys=keys, values=values):
            return all(k is not None and _literal(k) for k in keys) and all(_literal(v) for v in values)
        case ast.UnaryOp(op=ast.USub() | ast.UAdd(), operand=inner):
            return _literal(inner)
        case ast.Call(func=func, args=args, keywords=kws) if _constructor(func):
            return all(_literal(a) for a in args) and all(_literal(k.value) for k in kws)
    return False


def _constructor(func: ast.expr) -> bool:
    """A class by its name (``Decimal``, ``decimal.Decimal``) or a builtin container: not a call into the code."""
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name[:1].isupper() or name in BUILTIN_TYPES


def _has_call(node: ast.expr) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


class _Redraw(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        value = node.value
        if isinstance(value, bool) or value is None:
            return node
        if isinstance(value, int | float):
            return ast.Constant(value + 10**9 + secrets.randbelow(10**9))
        if isinstance(value, str) and _NUMERIC.fullmatch(value):
            frac = value.partition(".")[2]
            return ast.Constant(f"{10**9 + secrets.randbelow(10**9)}" + (f".{frac}" if frac else ""))
        if isinstance(value, str):
            return ast.Constant(f"canary-{secrets.token_hex(6)}")
        return node
