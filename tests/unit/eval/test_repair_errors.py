"""The package's exception classes as the test process sees them (servelab.eval.repair._errors): for any class graph
(multiple inheritance included) and any order in which the tests meet the classes, ``except``/``pytest.raises`` of
each class catches exactly what it catches in one process. Random graphs, played in this process and through
servelab's real server program in a plain subprocess (no sandbox: the sandbox is not what is tested)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from servelab.eval.repair._proxy import remote_module
from tests.unit.eval.test_repair_wire import _served

BUILTINS = ["Exception", "LookupError", "ValueError", "KeyError", "ArithmeticError", "SystemExit"]


@st.composite
def graphs(draw: st.DrawFn) -> list[list[str]]:
    """Class i's bases: names of earlier classes and builtins, one to three of them."""
    out: list[list[str]] = []
    for i in range(draw(st.integers(1, 6))):
        pool = [f"E{j}" for j in range(i)] + BUILTINS
        out.append(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True)))
    return out


def _source(graph: list[list[str]]) -> str:
    lines = [f"class E{i}({', '.join(bases)}):\n    pass\n" for i, bases in enumerate(graph)]
    lines.append("def fail(i):\n    raise globals()[f'E{i}']('boom', i)\n")
    return "\n".join(lines)


def _caught(module: Any, count: int, order: list[int]) -> list[list[bool]]:
    """For each class raised (in ``order``), which of the package's classes (and builtins) catch it."""
    seen = []
    for i in order:
        try:
            module.fail(i)
        except BaseException as error:  # what pytest.raises would see
            names = [getattr(module, f"E{j}") for j in range(count)]
            seen.append(
                [isinstance(error, c) for c in names] + [isinstance(error, LookupError), error.args == ("boom", i)]
            )
    return seen


@settings(max_examples=40, deadline=None)
@given(graphs(), st.data())
def test_every_class_catches_what_it_catches_in_one_process(tmp_path_factory: Any, graph: Any, data: Any) -> None:
    source = _source(graph)
    local = types.ModuleType("shop")
    try:
        exec(compile(source, "shop.py", "exec"), local.__dict__)
    except TypeError:  # Python refuses the graph (no consistent MRO, clashing layouts)
        assume(False)
    order = data.draw(st.lists(st.integers(0, len(graph) - 1), min_size=1, max_size=8))
    root = tmp_path_factory.mktemp("errors")
    (Path(root) / "shop.py").write_text(source)
    for link in _served(root):
        assert _caught(remote_module(link, "shop"), len(graph), order) == _caught(local, len(graph), order)
