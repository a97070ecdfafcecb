"""The wire between the test process and the package's process (servelab.eval.repair._wire, _serve, _proxy):
plain data goes through unchanged, nothing else comes out of a decode whatever the sender wrote, and the test
side never sends what it compares with. The package's process here is servelab's real server program, run by
a plain Python on a small package."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import operator
import os
import subprocess
import sys
from collections import Counter, OrderedDict, defaultdict, namedtuple
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.eval.repair import _wire as wire
from servelab.eval.repair._proxy import Link, PackageError, Remote, remote_module
from servelab.eval.repair._wire import WireError, decode, encode
from servelab.eval.repair.session import SERVE

Pair = namedtuple("Pair", ["sku", "units"])  # what a package might return where a test compares with a tuple
PLAIN_TYPES = {type(None), bool, int, float, str, bytes, list, tuple, dict, set, frozenset, Decimal, Fraction,
               complex, dt.datetime, dt.date, dt.time, dt.timedelta, Counter, OrderedDict, defaultdict}  # fmt: skip
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.fractions()
    | st.complex_numbers(allow_nan=False)
    # fixed offsets: a zone's datetime crosses as its offset, and PEP 495 makes one in a fold or gap unequal to
    # every datetime of another zone, so "unchanged" is checked where equality means the same instant
    | st.datetimes(
        timezones=st.none() | st.builds(dt.timezone, st.timedeltas(dt.timedelta(hours=-23), dt.timedelta(hours=23)))
    )
    | st.dates()
    | st.times()
    | st.timedeltas()
)
hashable = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=8)
plain = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(hashable, inner, max_size=4)
        | st.sets(hashable, max_size=4)
    ),
    max_leaves=20,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["$", "v", "id", "mro", "x"]), inner, max_size=3)
        | st.fixed_dictionaries(
            {
                "$": st.sampled_from(
                    [
                        "tuple",
                        "set",
                        "dict",
                        "bytes",
                        "decimal",
                        "float",
                        "fraction",
                        "complex",
                        "date",
                        "timedelta",
                        "namedtuple",
                        "eq",
                        "Counter",
                        "OrderedDict",
                        "defaultdict",
                    ]
                ),
                "v": inner,
                "name": st.sampled_from(["P", "1x", "__eq__"]),
                "fields": st.lists(st.sampled_from(["a", "b", "_x", "1", "def"]), max_size=3),
                "factory": st.none() | st.sampled_from(["int", "list", "eval", "__import__", "object", ""]) | inner,
            }
        )
    ),
    max_leaves=20,
)


def _no_other(value: Any) -> dict[str, Any]:
    raise TypeError(type(value).__name__)


def _only_plain(value: Any) -> bool:
    if type(value) not in PLAIN_TYPES and not (isinstance(value, tuple) and type(value).__module__ == wire.__name__):
        return False
    if type(value) is defaultdict and value.default_factory not in (None, *wire.FACTORIES.values()):
        return False
    if isinstance(value, dict):
        return all(_only_plain(k) and _only_plain(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return all(_only_plain(v) for v in value)
    return True


@given(plain)
def test_plain_data_crosses_unchanged(value: Any) -> None:
    sent = json.loads(json.dumps(encode(value, _no_other)))
    got = decode(sent, lambda tag: pytest.fail("no handle was sent"))
    assert got == value and (type(got) is type(value) or type(value) is Pair)


def test_a_named_tuple_comes_as_a_class_of_the_receiver_with_its_fields() -> None:
    got = decode(json.loads(json.dumps(encode(Pair("AB-1", 3), _no_other))), lambda tag: None)
    assert got == ("AB-1", 3) and got.sku == "AB-1" and type(got) is not Pair and type(got).__eq__ is tuple.__eq__
    assert type(got).__module__ == wire.__name__ and _only_plain(got)


@given(json_values)
@settings(max_examples=300)
def test_whatever_the_sender_writes_decodes_to_plain_data_or_is_refused(data: Any) -> None:
    try:
        got = decode(data, lambda tag: pytest.fail("no handle tag drawn"))
    except WireError:
        return
    assert _only_plain(got)


def test_subclasses_of_plain_types_are_not_plain() -> None:
    class Sneaky(int):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    assert encode([1, Sneaky(2)], lambda v: {"$": "ref", "id": 0}) == [1, {"$": "ref", "id": 0}]
    # nor as its base type where the package's own loop sends subclasses that behave as their base: it has an __eq__
    assert encode([1, Sneaky(2)], lambda v: {"$": "ref", "id": 0}, as_base=True) == [1, {"$": "ref", "id": 0}]
    with pytest.raises(WireError):
        decode({"$": "always-equal"}, lambda tag: None)


PACKAGE = """
from dataclasses import dataclass

class OutOfStock(ValueError):
    pass

@dataclass(frozen=True)
class Point:
    x: int

class Box:
    def __init__(self, n):
        self.n = n
    def get(self):
        return self.n
    def fail(self):
        raise OutOfStock("none left")
    def stop(self):
        raise KeyboardInterrupt
    def decode(self):
        return b"\\xff".decode()

ZERO = Box(0)
"""


def _served(root: Path) -> Iterator[Link]:
    """servelab's server program on ``root`` in a plain subprocess, and the link to it."""
    requests, answers = os.pipe(), os.pipe()
    proc = subprocess.Popen([sys.executable, "-I", "-B", "-c", SERVE, str(root), str(requests[0]),
                             str(answers[1])], pass_fds=(requests[0], answers[1]))  # fmt: skip
    os.close(requests[0])
    os.close(answers[1])
    yield Link(requests[1], answers[0], timeout_s=60)
    os.close(requests[1])
    os.close(answers[0])
    proc.kill()
    proc.wait()


def both_ways(way: str, root: Path, source: str) -> Iterator[tuple[Any, Link | None]]:
    """The package ``source`` as ``shop``: imported plainly in this process ("in process", no link) or through
    servelab's server program ("through servelab"): what the same test sees each way."""
    (root / "shop.py").write_text(source)
    if way == "in process":
        spec = importlib.util.spec_from_file_location("shop", root / "shop.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["shop"] = module
        spec.loader.exec_module(module)
        yield module, None
        sys.modules.pop("shop", None)
        return
    for served in _served(root):
        yield remote_module(served, "shop"), served


WAYS = ["in process", "through servelab"]


@pytest.fixture()
def link(tmp_path: Path) -> Iterator[Link]:
    (tmp_path / "shop.py").write_text(PACKAGE)
    yield from _served(tmp_path)


@pytest.fixture()
def other(tmp_path: Path) -> Iterator[Link]:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "shop.py").write_text(PACKAGE)
    yield from _served(tmp_path / "other")


def test_comparing_a_result_sends_nothing_to_the_package(link: Link) -> None:
    shop = remote_module(link, "shop")
    box = shop.Box(5)
    assert isinstance(box, Remote) and box.get() == 5
    sent = link.requests
    # a handle is equal to itself; nothing else is answered, though Box compares by identity: only the package could
    # say so, and what it says of its classes is not trusted
    assert box == box and (box != box) is False and "Box" in repr(box)
    assert shop.ZERO is shop.ZERO and box is not shop.ZERO  # one stand-in per object of the package
    for compare in (lambda: box != 5, lambda: box == shop.ZERO, lambda: hash(box)):
        with pytest.raises(TypeError, match="package"):
            compare()
    assert link.requests == sent + 4  # the four getattrs of ZERO
    # Point has its own __eq__ (a dataclass): only the package's code could compare it, so no comparison answers
    one, other = shop.Point(1), shop.Point(1)
    sent = link.requests
    assert one == one and (one != one) is False and one is not other
    for compare in (lambda: one == other, lambda: one != other, lambda: one == 1, lambda: operator.ne(1, one),
                    lambda: {one}, lambda: hash(one), lambda: one in [other]):  # fmt: skip
        with pytest.raises(TypeError, match="package"):
            compare()
    assert link.requests == sent


def test_exceptions_come_back_as_classes_of_the_test_side(link: Link) -> None:
    shop = remote_module(link, "shop")
    out_of_stock = shop.OutOfStock
    assert isinstance(out_of_stock, type) and issubclass(out_of_stock, ValueError)
    with pytest.raises(out_of_stock, match="none left"):
        shop.Box(1).fail()
    with pytest.raises(BaseException) as stopped:  # a KeyboardInterrupt would stop pytest: it comes as a
        shop.Box(1).stop()  # BaseException, still no Exception
    assert type(stopped.value) is BaseException
    with pytest.raises(UnicodeDecodeError):  # a class whose constructor wants other arguments than its args
        shop.Box(1).decode()
    assert link.dead is None
    with pytest.raises(ModuleNotFoundError):
        remote_module(link, "no_such_module")


def test_only_plain_data_and_the_package_own_objects_can_be_handed_to_it(link: Link, other: Link) -> None:
    shop, reference = remote_module(link, "shop"), remote_module(other, "shop")
    assert shop.Box(shop.ZERO).get() == shop.ZERO
    with pytest.raises(TypeError, match="only plain data"):
        shop.Box(object())
    with pytest.raises(TypeError, match="only plain data"):  # the reference's object is not the package's
        shop.Box(reference.ZERO)


def test_a_package_that_stops_answering_fails_every_later_request(tmp_path: Path) -> None:
    requests, answers = os.pipe(), os.pipe()
    os.write(answers[1], b'{"ok": {"$": "always-equal"}}\n')
    link = Link(requests[1], answers[0], timeout_s=60)
    with pytest.raises(PackageError, match="not plain data"):
        link.ask({"op": "import", "name": "shop"})
    with pytest.raises(PackageError):
        link.ask({"op": "import", "name": "shop"})
    for fd in (*requests, *answers):
        os.close(fd)


def test_an_exception_with_a_long_lineage_is_refused() -> None:
    requests, answers = os.pipe(), os.pipe()
    lineage = [[f"m{i}", f"E{i}"] for i in range(100)] + [["builtins", "Exception"]]  # fits in a pipe
    os.write(answers[1], json.dumps({"raise": {"mro": lineage, "args": []}}).encode() + b"\n")
    with pytest.raises(PackageError, match="not plain data"):
        Link(requests[1], answers[0], timeout_s=60).ask({"op": "import", "name": "shop"})
    for fd in (*requests, *answers):
        os.close(fd)


def test_two_inlined_modules_may_not_bind_one_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The programs put several modules in one namespace: a name bound by two of them is refused, not shadowed."""
    from servelab.eval.repair import session

    (tmp_path / "first.py").write_text("def helper():\n    return 1\n")
    (tmp_path / "second.py").write_text("LIMIT: int = 3\nhelper = None\n")
    (tmp_path / "third.py").write_text("(a, b) = 1, 2\n")
    monkeypatch.setattr(session, "_HERE", tmp_path)
    with pytest.raises(RuntimeError, match="second and first both define helper"):
        session.program("first", "second")
    assert "a, b" in session.program("first", "third")
    assert session.SERVE and session.TESTS  # servelab's own programs passed the same check at import
