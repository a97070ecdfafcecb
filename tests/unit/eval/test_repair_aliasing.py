"""Aliasing through the grading link (servelab.eval.repair._shared): a list, dict or set that crosses between the
test process and the package's process is one object on each side, the same contents at every request, so a test
of aliasing says through servelab what it says in one process. Each check runs the same steps on the package
imported here, in this process, and through servelab's real server program in a plain subprocess (no sandbox:
the sandbox is not what is tested), and compares what the test sees."""

from __future__ import annotations

import types
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.eval.repair._proxy import Link, PackageError, remote_module
from servelab.eval.repair._shared import Shared
from servelab.eval.repair._wire import WireError
from tests.unit.eval.test_repair_wire import _served

PACKAGE = '''
import collections


class Cart:
    """Keeps the list it is given (or a new one) and hands out that very list from items()."""

    def __init__(self, items=None):
        self._items = items if items is not None else []

    def items(self):
        return self._items

    def items_copy(self):
        return list(self._items)

    def add(self, item):
        self._items.append(item)

    def replace(self, items):
        self._items = items


def sort_in_place(values):
    values.sort()


def sorted_copy(values):
    return sorted(values)


def fill(buffer, n):
    buffer.extend(range(n))


def same(value):
    return value


def nested():
    inner = [1]
    return {"a": inner, "b": inner, "t": (inner,)}


def loop():
    me = []
    me.append(me)
    return me


STATE = {"count": 0}
TALLY = collections.Counter()
ORDER = collections.OrderedDict()
GROUPS = collections.defaultdict(list)
SEEN = set()


def bump(word):
    STATE["count"] += 1
    TALLY[word] += 1
    ORDER[word] = STATE["count"]
    ORDER.move_to_end(word, last=False)
    GROUPS[len(word)].append(word)
    SEEN.add(word)


def tables():
    return STATE, TALLY, ORDER, GROUPS, SEEN


def broken_then_raise(values):
    values.append("partial")
    raise ValueError("stopped half way")
'''


def _local() -> Any:
    module = types.ModuleType("shop")
    exec(compile(PACKAGE, "shop.py", "exec"), module.__dict__)
    return module


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Link, Any]]:
    (tmp_path / "shop.py").write_text(PACKAGE)
    for link in _served(tmp_path):
        yield link, remote_module(link, "shop")


@pytest.fixture(params=["in process", "through servelab"])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "in process":
        yield _local()
        return
    (tmp_path / "shop.py").write_text(PACKAGE)
    for link in _served(tmp_path):
        yield remote_module(link, "shop")


def test_a_result_the_package_handed_out_as_its_own_is_its_own(shop: Any) -> None:
    cart = shop.Cart()
    mine = cart.items()
    mine.append("x")  # the package's own list: its cart changes
    assert cart.items() == ["x"] and cart.items() is mine
    cart.add("y")  # and what the test holds sees the package's change
    assert mine == ["x", "y"]
    copy = cart.items_copy()
    copy.append("z")
    cart.add("w")
    assert cart.items() == ["x", "y", "w"] and copy == ["x", "y", "z"] and cart.items_copy() is not copy


def test_the_tests_own_list_handed_in_is_the_packages_until_it_lets_go(shop: Any) -> None:
    values = [3, 1, 2]
    assert shop.sort_in_place(values) is None and values == [1, 2, 3]  # sorted in place: the test's list
    kept = [3, 1, 2]
    assert shop.sorted_copy(kept) == [1, 2, 3] and kept == [3, 1, 2]
    buffer: list[int] = []
    shop.fill(buffer, 3)
    assert buffer == [0, 1, 2]
    given_list: list[str] = []
    cart = shop.Cart(given_list)
    given_list.append("q")  # the cart kept the caller's list
    assert cart.items() == ["q"] and cart.items() is given_list and shop.same(given_list) is given_list


def test_identity_holds_at_every_depth_and_round_a_cycle(shop: Any) -> None:
    made = shop.nested()
    assert made["a"] is made["b"] is made["t"][0]
    made["a"].append(2)
    assert made["b"] == [1, 2]
    me = shop.loop()
    assert me[0] is me and len(me) == 1


def test_dicts_and_sets_of_every_kind_stay_in_step_in_both_directions(shop: Any) -> None:
    state, tally, order, groups, seen = shop.tables()
    shop.bump("ab")
    shop.bump("cd")
    shop.bump("ab")
    assert state == {"count": 3} and tally == Counter({"ab": 2, "cd": 1}) and type(tally) is Counter
    assert list(order) == ["ab", "cd"] and type(order) is OrderedDict and order == OrderedDict(ab=3, cd=2)
    assert groups == {2: ["ab", "cd", "ab"]} and type(groups) is defaultdict and groups[9] == []
    assert seen == {"ab", "cd"}
    state["count"] = 10  # the test's change reaches the package's table
    seen.discard("ab")
    shop.bump("e")
    assert shop.tables()[0] == {"count": 11} and seen == {"cd", "e"} and 9 in groups


def test_a_change_made_before_the_package_raised_reaches_the_test(shop: Any) -> None:
    values: list[str] = []
    with pytest.raises(ValueError, match="half way"):
        shop.broken_then_raise(values)
    assert values == ["partial"]


def test_the_tables_forget_what_the_test_let_go(served: tuple[Link, Any]) -> None:
    link, shop = served
    cart = shop.Cart()
    held = cart.items()
    for n in range(300):
        shop.sorted_copy([n, 1])
    cart.add("kept")
    assert held == ["kept"]  # still shared after everything else was forgotten
    assert len(link.shared.objects) < 10
    assert link.forgotten == []  # every forgotten number was told to the package's process


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("cart")),
        st.tuples(st.just("items"), st.integers(0, 3)),
        st.tuples(st.just("copy"), st.integers(0, 3)),
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 9)),
        st.tuples(st.just("give"), st.integers(0, 3), st.integers(0, 7)),
        st.tuples(st.just("append"), st.integers(0, 7), st.integers(0, 9)),
        st.tuples(st.just("nest"), st.integers(0, 7), st.integers(0, 7)),
        st.tuples(st.just("sort"), st.integers(0, 7)),
    ),
    max_size=30,
)


def _play(shop: Any, ops: list[tuple[Any, ...]]) -> list[Any]:
    """The ops on ``shop``, and after each what a test can see: every held list's contents (by value, nested ones
    by their place among the held) and which held lists are the same object."""
    carts: list[Any] = [shop.Cart()]
    held: list[list[Any]] = [[]]
    seen: list[Any] = []

    def pick(items: list[Any], i: int) -> Any:
        return items[i % len(items)]

    for op, *args in ops:
        if op == "cart":
            carts.append(shop.Cart())
        elif op == "items":
            held.append(pick(carts, args[0]).items())
        elif op == "copy":
            held.append(pick(carts, args[0]).items_copy())
        elif op == "add":
            pick(carts, args[0]).add(args[1])
        elif op == "give":
            pick(carts, args[0]).replace(pick(held, args[1]))
        elif op == "append":
            pick(held, args[0]).append(args[1])
        elif op == "nest":
            pick(held, args[0]).append(pick(held, args[1]))
        elif op == "sort":
            values = pick(held, args[0])
            if all(type(v) is int for v in values):
                shop.sort_in_place(values)
        seen.append(_view(held, carts))
    return seen


def _view(held: list[list[Any]], carts: list[Any]) -> Any:
    place = {id(h): i for i, h in enumerate(held)}
    contents = [[("held", place.get(id(v), -1)) if type(v) is list else v for v in h] for h in held]
    same = [[a is b for b in held] for a in held]
    return contents, same, [len(c.items()) for c in carts]


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_any_sequence_of_calls_and_changes_reads_as_in_one_process(tmp_path_factory: Any, ops: Any) -> None:
    root = tmp_path_factory.mktemp("shop")
    (root / "shop.py").write_text(PACKAGE)
    for link in _served(root):
        assert _play(remote_module(link, "shop"), ops) == _play(_local(), ops)


def test_what_the_package_sends_of_containers_is_checked() -> None:
    """The test side's table takes only the package's numbering for new containers, only mutable kinds, and a
    container keeps its kind."""
    table = Shared(parity=0)

    def decode(content: Any) -> Any:
        from servelab.eval.repair._wire import decode as plain

        return plain(content, table.resolve)

    table.apply([[1, [1, 2]]], decode)
    assert table.objects[1] == [1, 2]
    for bad in ([[2, []]], [[3, {"$": "tuple", "v": []}]], [[1, {"$": "set", "v": []}]], [[-1, []]], {"1": []},
                [[5, {"$": "defaultdict", "v": [], "factory": "print"}]]):  # fmt: skip
        with pytest.raises(WireError):
            table.apply(bad, decode)


def test_a_package_that_names_a_container_of_the_tests_it_never_got_kills_the_link(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(PACKAGE)
    for link in _served(tmp_path):
        link.shared.ref([], list)  # number 0, never sent
        link.shared.ref([], list)  # number 2
        link.shared.forget([0, 2])
        link.forgotten = []
        message = {"ok": None, "state": [[0, ["forged"]]]}
        with pytest.raises(PackageError, match="not plain data"):
            link._outcome(message)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_test_side_forgets_exactly_what_it_cannot_reach(data: Any) -> None:
    """Random graphs of shared lists (cycles and self-loops included), some held by the test: the table forgets
    every list the test cannot reach and none it can (a forgotten list it holds would desynchronize, and the package
    could no longer name it)."""
    from servelab.eval.repair._wire import contents

    count = data.draw(st.integers(1, 8))
    made: list[list[Any]] = [[] for _ in range(count)]
    for i in range(count):
        made[i].extend(made[j] for j in data.draw(st.lists(st.integers(0, count - 1), max_size=3)))
    table = Shared(parity=0)
    for item in made:
        table.ref(item, list)
    table.changes(lambda value, kind: contents(value, kind, lambda v: pytest.fail("a handle"), False, table))
    if data.draw(st.booleans()):  # the test changed something after the last message: snapshots are stale
        made[0].append(made[-1])
    held = data.draw(st.lists(st.integers(0, count - 1), unique=True))
    roots = [made[i] for i in held]
    reach: set[int] = set()  # ids only: holding the lists here would hold them for the table too
    stack = list(roots)
    while stack:
        item = stack.pop()
        if id(item) not in reach:
            reach.add(id(item))
            stack.extend(item)
    del made, item, stack
    table.unheld()
    assert {id(v) for v in table.objects.values()} == reach, (held, len(table.objects))
    assert roots is not None
