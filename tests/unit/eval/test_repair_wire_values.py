"""What the test process makes of the package's values (servelab.eval.repair._wire, _serve, _proxy), against what
plain Python makes of them in one process:

- an instance of a subclass of a plain type that behaves as its base type (a ``Counter``, an ``IntEnum`` member,
  a ``class Ticket(int)``) arrives as the value of that base type, of exact types, at any depth; the standard
  library's ``Counter``, ``OrderedDict`` and ``defaultdict`` arrive as themselves (the receiver's own classes);
- a subclass that changes any of its base's behaviour is not sent as a value, and a handle whose class has its own
  ``__eq__``/``__hash__``/``__contains__`` refuses to be compared (TypeError: the test fails) instead of answering
  by handle number;
- one stand-in per object of the package: ``is`` says what it says there.
The package's process here is servelab's real server program, run by a plain Python on a small package."""

from __future__ import annotations

import enum
import json
import operator
import random
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.eval.repair import _wire as wire
from servelab.eval.repair._proxy import Link, Remote, remote_module
from servelab.eval.repair._wire import decode, encode
from tests.unit.eval.test_repair_wire import _only_plain, _served, plain

HANDLE = {"$": "ref", "id": 0}


class Int(int):
    """A ticket number: behaves as an int."""


class Slotted(int):
    __slots__ = ()


class Labelled(int):
    def label(self) -> str:  # a method of its own, that int has not: the test process gets AttributeError
        return f"#{int(self)}"


class Flt(float):
    pass


class Text(str):
    pass


class Raw(bytes):
    pass


class Dec(Decimal):
    pass


class Frac(Fraction):
    pass


class Items(list[Any]):
    def __init__(self, *args: Any) -> None:  # construction only
        super().__init__(*args)


class Row(tuple[Any, ...]):
    pass


class Table(dict[Any, Any]):
    pass


class Bag(set[Any]):
    pass


class Frozen(frozenset[Any]):
    pass


class Tally(Counter[Any]):
    pass


class Color(enum.IntEnum):
    RED = 1
    GREEN = 2


class Mode(enum.StrEnum):
    FAST = "fast"


SCALAR_DISGUISES: dict[type, list[Any]] = {
    int: [int, Int, Slotted, Labelled],
    float: [float, Flt],
    str: [str, Text],
    bytes: [bytes, Raw],
    Decimal: [Decimal, Dec],
    Fraction: [Fraction, Frac],
}
DICT_DISGUISES: list[Any] = [dict, Table, Counter, Tally, OrderedDict, lambda d: defaultdict(None, d),
                             lambda d: defaultdict(int, d), lambda d: defaultdict(list, d)]  # fmt: skip


def disguise(value: Any, rnd: random.Random) -> Any:
    """``value`` with each part, at random, an instance of a subclass of its type that behaves as that type."""
    kind = type(value)
    if kind in SCALAR_DISGUISES:
        return rnd.choice(SCALAR_DISGUISES[kind])(value)
    if kind is list:
        return rnd.choice([list, Items])(disguise(v, rnd) for v in value)
    if kind is tuple:
        return rnd.choice([tuple, Row])(disguise(v, rnd) for v in value)
    if kind in (set, frozenset):
        return rnd.choice([kind, Bag if kind is set else Frozen])(disguise(v, rnd) for v in value)
    if kind is dict:
        return rnd.choice(DICT_DISGUISES)({disguise(k, rnd): disguise(v, rnd) for k, v in value.items()})
    return value


def same_types(got: Any, sent: Any) -> bool:
    """Whether ``got`` is, at every depth, of the plain type ``sent``'s type behaves as."""
    kind = type(sent)
    if type(got) is not next((k for k in kind.__mro__ if k in wire.BASES), type(None)):
        return False
    if isinstance(sent, dict):
        pairs = list(zip(dict.items(got), dict.items(sent), strict=True))
        return all(same_types(gk, sk) and same_types(gv, sv) for (gk, gv), (sk, sv) in pairs)
    if isinstance(sent, list | tuple):
        return all(same_types(g, s) for g, s in zip(got, sent, strict=True))
    return True


def crossed(value: Any) -> Any:
    """``value`` as the package's own loop sends it and the test process decodes it."""
    sent = json.loads(json.dumps(encode(value, lambda v: pytest.fail(f"a handle for {v!r}"), as_base=True)))
    return decode(sent, lambda tag: pytest.fail("no handle was sent"))


@given(plain, st.randoms(use_true_random=False))
def test_a_subclass_that_behaves_as_its_base_arrives_as_the_base_value(value: Any, rnd: random.Random) -> None:
    sent = disguise(value, rnd)
    got = crossed(sent)
    assert got == crossed(value) and _only_plain(got)  # what the plain value itself makes: nothing changed
    assert same_types(got, sent)


def test_standard_library_dicts_and_enums_arrive_as_plain_python_sees_them() -> None:
    got = crossed([Counter("aab"), OrderedDict([("b", 1), ("a", 2)]), defaultdict(list, x=[Color.RED])])
    tally, ordered, groups = got
    assert type(tally) is Counter and tally == {"a": 2, "b": 1} and tally["absent"] == 0
    assert type(ordered) is OrderedDict and ordered != OrderedDict([("a", 2), ("b", 1)]) and ordered == {"a": 2, "b": 1}
    assert type(groups) is defaultdict and groups.default_factory is list and groups == {"x": [1]}
    assert groups["new"] == [] and type(groups["x"][0]) is int
    assert crossed([Color.GREEN, Mode.FAST]) == [2, "fast"] and _only_plain(crossed([Color.GREEN, Mode.FAST]))


class Mixin:
    def __ne__(self, other: object) -> bool:
        return True


class WithMixin(Fraction, Mixin):  # Fraction has no __ne__ of its own: the mixin's would decide !=
    pass


class Flags(enum.IntFlag):  # ~, len(), iteration of a member are not the int's
    A = 1


class OldStyle(int, enum.Enum):  # str() is "OldStyle.X", not the int's
    X = 5


class Shouting(enum.StrEnum):
    A = "a"

    def __str__(self) -> str:
        return "A!"


NOT_PLAIN = [WithMixin(1, 2), Flags.A, OldStyle.X, Shouting.A, defaultdict(lambda: 0, a=1)]
BASES = [3, 1.5, "ab", b"x", [1], (1,), {"a": 1}, {1}, frozenset({1}), Decimal("1.5"), Counter("ab")]


SPECIAL = ["__eq__", "__ne__", "__hash__", "__lt__", "__len__", "__iter__", "__contains__", "__getitem__", "__repr__",
           "__str__", "__format__", "__bool__", "__add__", "__getattribute__", "__reduce__", "__index__",
           "__float__"]  # fmt: skip


@st.composite
def overriding(draw: st.DrawFn) -> Any:
    """An instance of a subclass of a plain type that defines one of its base's special methods or other methods
    (or ``__missing__``, ``__copy__``), or sets a method's name on the instance: a copy of the base's own where it
    has one, so even the behaviour is the same; the class says it differs, and that is enough."""
    value = draw(st.sampled_from(BASES))
    base = type(value)
    names = [n for n in dir(base) if not n.startswith("_") or n in SPECIAL]
    name = draw(st.sampled_from([*names, "__missing__", "__copy__"]))
    same = getattr(base, name, None)
    method = (lambda self, *a, **k: same(self, *a, **k)) if same is not None else (lambda self, *a, **k: None)
    if draw(st.booleans()) or name.startswith("__"):
        return type("Overriding", (base,), {name: method})(value)
    made = type("WithDict", (base,), {})(value)
    made.__dict__[name] = method
    return made


@given(overriding())
def test_a_subclass_that_changes_any_of_its_base_goes_as_a_handle(value: Any) -> None:
    assert wire.plain_base(value) is None
    assert encode([value], lambda v: HANDLE, as_base=True) == [HANDLE]


@pytest.mark.parametrize("value", NOT_PLAIN, ids=lambda v: type(v).__name__)
def test_subclasses_whose_behaviour_differs_go_as_handles(value: Any) -> None:
    assert encode(value, lambda v: HANDLE, as_base=True) == HANDLE


PACKAGE = """
import collections, enum
from dataclasses import dataclass

class Color(enum.IntEnum):
    RED = 1

class Mode(enum.StrEnum):
    FAST = "fast"

class Plain(enum.Enum):
    A = 1
    B = 2

@dataclass(frozen=True)
class Ticket:
    number: int

class Number(int):
    pass

class Loud(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

class Shelf:
    def __init__(self):
        self.items = ["a", "b"]
    def __iter__(self):
        return iter(self.items)

class Yes(Shelf):
    def __contains__(self, item):
        return True

class Cart:
    def copy(self):
        return self

CART = Cart()

def tally(text):
    return collections.Counter(text.split())

def groups():
    made = collections.defaultdict(list)
    made["x"].append(Color.RED)
    return made

def ordered():
    return collections.OrderedDict([("b", 1), ("a", 2)])

def counted():
    return collections.defaultdict(lambda: 0, a=1)

def tickets(n):
    return [Ticket(1) for _ in range(n)]

def same(x):
    return x
"""


@pytest.fixture()
def shop(tmp_path: Path) -> Iterator[Any]:
    (tmp_path / "shop.py").write_text(PACKAGE)
    for link in _served(tmp_path):
        yield remote_module(link, "shop")


def test_results_of_standard_subclasses_compare_as_in_plain_python(shop: Any) -> None:
    tally = shop.tally("a b a")
    assert tally == {"a": 2, "b": 1} and type(tally) is Counter and tally["zzz"] == 0
    groups = shop.groups()
    assert groups == {"x": [1]} and type(groups) is defaultdict and groups["new"] == []
    assert shop.ordered() == {"a": 2, "b": 1} and shop.ordered() != OrderedDict([("a", 2), ("b", 1)])
    assert shop.Color.RED == 1 and type(shop.Color.RED) is int and shop.Mode.FAST == "fast"
    assert shop.Number(3) == 3 and type(shop.Number(3)) is int and shop.Number(3) in {3}
    # an Enum member is a handle: equal to itself, and nothing else is answered, though its class compares by
    # identity (what the package says of its classes is not trusted: the loop that says it may be rewritten)
    assert shop.Plain.A is shop.Plain.A and shop.Plain.A == shop.Plain.A and shop.Plain.A is not shop.Plain.B
    for check in (lambda: shop.Plain.A != shop.Plain.B, lambda: len({shop.Plain.A, shop.Plain.B})):
        with pytest.raises(TypeError, match="package"):
            check()


def test_a_handle_with_its_own_equality_is_never_compared(shop: Any) -> None:
    first, second = shop.tickets(2)
    loud, counted = shop.Loud(3), shop.counted()
    assert isinstance(loud, Remote) and isinstance(counted, Remote)
    assert first == first and first in [first] and first is not second
    checks = [lambda: first == second, lambda: first != second, lambda: len({first, second}), lambda: hash(first),
              lambda: first in [second], lambda: second not in {first}, lambda: loud == 3, lambda: operator.ne(3, loud),
              lambda: counted == {"a": 1}]  # fmt: skip
    for check in checks:
        with pytest.raises(TypeError, match=r"opaque object of the package|hash\(\)"):
            check()


def test_one_stand_in_per_object_of_the_package(shop: Any) -> None:
    cart = shop.CART
    assert cart.copy() is cart and shop.same(cart) is cart and id(shop.CART) == id(cart)
    assert shop.Cart() is not shop.Cart()


def test_in_on_a_handle_is_never_answered(shop: Any) -> None:
    """Only the package could say whether its class has its own ``__contains__``: ``in`` on any handle fails."""
    assert list(shop.Shelf()) == ["a", "b"]  # iterating a handle asks for its items: plain data
    for container in (shop.Shelf(), shop.Yes()):
        with pytest.raises(TypeError, match="__contains__"):
            _ = "z" in container


def test_what_the_package_says_of_a_handle_is_not_read() -> None:
    """A rewritten loop may claim any class compares by identity (the original attack: a dataclass's equal tickets
    counted as different): every handle is opaque whatever its tag says, one stand-in per number."""
    link = Link(-1, -1, 1.0)
    for number, tag in enumerate([{"eq": "own"}, {"eq": "identity", "in": "iter"}, {"eq": "identity-unhashable"}, {}]):
        handle = link._ref({"$": "ref", "id": number, **tag})
        assert link._ref({"$": "ref", "id": number, "eq": "identity"}) is handle and handle == handle
        for check in (operator.eq, operator.ne, lambda h, _: hash(h), lambda h, v: v in h):
            with pytest.raises(TypeError, match="package"):
                check(handle, 1)
