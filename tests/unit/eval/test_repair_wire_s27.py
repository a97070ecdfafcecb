"""Round s27, at the wire: what a test sees of the package through servelab's real server program (run by a plain
Python on a small package, as tests/unit/eval/test_repair_wire.py does) against what the same test sees of the
same package imported plainly. Every test asserts the plain-Python answer; each was a finding against session 26's
grader (its docstring says the class), held since. What is still narrower than Python is listed in
docs/repair-grading.md ("What it still cannot do")."""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servelab.eval.repair._proxy import Link, remote_module
from servelab.eval.repair._wire import WireError, decode
from tests.unit.eval.test_repair_wire import _served

PACKAGE = '''
import collections, datetime, decimal, enum, math, os, random, sys, warnings, zoneinfo
from typing import NamedTuple


class Status(enum.Enum):
    OPEN = "open"
    SHIPPED = "shipped"


def by_status():
    return {Status.OPEN: 2, Status.SHIPPED: 1}


def open_statuses():
    return frozenset({Status.OPEN})


def blob(n):
    return b"x" * n


def precise(digits):
    return decimal.Decimal("0." + "3" * digits)


def factorial(n):
    return math.factorial(n)


def chain(n):  # a linked list as nested pairs
    out = None
    for i in range(n):
        out = (i, out)
    return out


def normalize(rows):
    """Strips every row, in place (the caller's list)."""
    rows[:] = [r.strip() for r in rows]


def add_default(tags=[]):  # noqa: B006
    tags.append("x")
    return tags


class StockError(Exception):
    pass


class OutOfStock(StockError, LookupError):
    def __init__(self, sku, available):
        super().__init__(sku, available)
        self.sku, self.available = sku, available

    def __str__(self):
        return f"{self.sku}: only {self.available} left"


class BadQuantity(StockError, ValueError):
    pass


def out_of_stock():
    raise OutOfStock("apple", 2)


def bad_quantity():
    raise BadQuantity(0)


def exit_code(code):
    sys.exit(code)


def validate_all():
    raise ExceptionGroup("2 bad rows", [ValueError("row 1"), KeyError("row 2")])


def wrapped():
    try:
        {}["k"]
    except KeyError as exc:
        raise ValueError("bad config") from exc


def parse(lines):
    """Yields each line's int; raises ValueError at the first bad one."""
    for line in lines:
        yield int(line)


def naturals():
    n = 0
    while True:
        yield n
        n += 1


def say(text):
    print(text)
    print("warning:", text, file=sys.stderr)


def old_api():
    warnings.warn("old_api is deprecated", DeprecationWarning, stacklevel=2)
    return 1


def currency():
    return os.environ.get("SHOP_CURRENCY", "USD")


def roll():
    return random.randint(1, 10**9)


def paris_noon():
    return datetime.datetime(2024, 3, 30, 12, 0, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))


class Line(NamedTuple):
    sku: str
    qty: int
    price: float

    @property
    def total(self):
        return self.qty * self.price


def line():
    return Line("a", 2, 1.5)


class Session:
    def __init__(self):
        self.open = False

    def __enter__(self):
        self.open = True
        return self

    def __exit__(self, *exc):
        self.open = False
        return False


class Money:
    def __init__(self, cents):
        self.cents = cents

    def __add__(self, other):
        return Money(self.cents + other.cents)

    def __str__(self):
        return f"${self.cents / 100:.2f}"


def buffer():
    return bytearray(b"ab")


class NoDoc:
    def method(self):
        return 1


LIMIT_OBJ = object()
NAN_PAIR = [float("nan"), float("nan")]


def two_nans():
    return {float("nan"): "first", float("nan"): "second"}
'''


@pytest.fixture()
def pkg(tmp_path: Path) -> Iterator[Any]:
    (tmp_path / "shop.py").write_text(PACKAGE)
    for link in _served(tmp_path):
        yield remote_module(link, "shop")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same package imported plainly, in this process (what the task's tests see outside servelab)."""
    path = tmp_path_factory.mktemp("plain") / "shop_plain.py"
    path.write_text(PACKAGE)
    spec = importlib.util.spec_from_file_location("shop_plain", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _link(module: Any) -> Link:
    return module.__dict__["__remote__"]._link  # type: ignore[no-any-return]


# --- 1. honest answers refused as "not plain data": the grade says TAMPERED -----------------------------------
@pytest.mark.parametrize("call", ["by_status()", "open_statuses()", "blob(40_000)", "precise(70_000)"])
def test_an_honest_answer_is_plain_data(pkg: Any, plain: Any, call: str) -> None:
    """Class: decode refuses values servelab's own loop sends, and the refusal kills the link as "not plain data"
    (grader.verdict -> "tampered"). A dict or set with an Enum member (any handle) in a key: ``dict(pairs)`` hashes
    the Remote -> TypeError -> WireError (_wire._tagged). bytes over 32 KiB, a Decimal/Fraction over 65,536
    characters: MAX_TEXT is checked on decode only (_wire._tagged), never on encode."""
    expected = eval(call, vars(plain))
    got = eval(call, {"blob": pkg.blob, "precise": pkg.precise, "by_status": pkg.by_status,
                      "open_statuses": pkg.open_statuses})  # fmt: skip
    assert got == expected if call.startswith(("blob", "precise")) else len(got) == len(expected)
    assert _link(pkg).dead is None


# --- 2. what the package does to the test's own objects (arguments) --------------------------------------------
def test_the_package_changes_the_list_it_is_handed(pkg: Any, plain: Any) -> None:
    """Class: an argument crosses as a copy. A function that must (or must not) change the caller's list is
    graded as if it never touched it: "normalizes in place" fails a correct repair, "leaves its argument alone"
    passes a wrong one (tests/unit/eval/test_grading_attack_s27.py, ranking)."""
    rows, plain_rows = [" a ", "b "], [" a ", "b "]
    plain.normalize(plain_rows)
    pkg.normalize(rows)
    assert rows == plain_rows == ["a", "b"]


# --- 3. process-wide channels: stdout, stderr, warnings, environment, random -----------------------------------
def test_what_the_package_prints_reaches_capsys(pkg: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Class: the package's effects on process-wide state happen in another process. capsys/capfd/caplog see
    nothing it prints or logs (a "prints nothing" test passes a package that prints)."""
    pkg.say("hello")
    captured = capsys.readouterr()
    assert captured.out == "hello\n" and "warning: hello" in captured.err


def test_a_deprecation_warning_of_the_package_is_seen(pkg: Any) -> None:
    """Same class: pytest.warns, ``filterwarnings = error`` and ``simplefilter("error")`` never see the package's
    warnings (a "warns nothing" test passes a package that warns)."""
    with pytest.warns(DeprecationWarning):
        pkg.old_api()


# --- 4. exceptions --------------------------------------------------------------------------------------------
def test_an_exception_keeps_its_attributes_and_message(pkg: Any) -> None:
    """Class: only an exception's class names and up to 8 args cross (_serve.reply); its attributes, its own
    __str__, __cause__/__context__ and notes are lost: ``match=`` and ``excinfo.value.x`` fail correct code."""
    with pytest.raises(pkg.OutOfStock, match="apple: only 2 left") as caught:
        pkg.out_of_stock()
    assert caught.value.available == 2


def test_a_chained_exception_keeps_its_cause(pkg: Any) -> None:
    with pytest.raises(ValueError) as caught:
        pkg.wrapped()
    assert isinstance(caught.value.__cause__, KeyError)


def test_the_exception_hierarchy_is_the_package_s(pkg: Any, plain: Any) -> None:
    """Class: the test process rebuilds exception classes by (module, qualname) from a linearized MRO, first
    lineage wins (_proxy.Link.exception_class): after OutOfStock(StockError, LookupError) crossed, StockError is a
    LookupError there and BadQuantity(StockError, ValueError) is no ValueError."""
    assert issubclass(pkg.OutOfStock, LookupError)
    assert issubclass(pkg.BadQuantity, ValueError) == issubclass(plain.BadQuantity, ValueError) is True
    assert issubclass(pkg.StockError, LookupError) == issubclass(plain.StockError, LookupError) is False


def test_system_exit_is_system_exit(pkg: Any) -> None:
    """Class: every BaseException that is not an Exception becomes RuntimeError (_proxy._builtin_error), SystemExit
    included, though pytest.raises(SystemExit) is how a CLI's exit status is tested (and a SystemExit in a test is
    only a failure for pytest, not a stop)."""
    with pytest.raises(SystemExit) as caught:
        pkg.exit_code(2)
    assert caught.value.code == 2


# --- 5. values that cross changed or not at all ----------------------------------------------------------------


# --- 6. the stand-in's own protocol ----------------------------------------------------------------------------


# --- 7. the test process decodes what a rewritten loop sends ---------------------------------------------------
def test_a_short_fraction_is_cheap_to_decode() -> None:
    """Class (c): the package can make the TEST process compute. A rewritten loop sends 12 characters,
    {"$": "fraction", "v": "1e100000000"}; ``Fraction(text)`` builds 10**100000000 in the test process (minutes
    of CPU: 1e7 already takes ~8 s here), so the grading runs out of time ("error: ran past the time limit")
    instead of being graded "tampered". servelab's loop never sends an exponent (Fraction.__str__ is n/d)."""
    start = time.monotonic()
    with contextlib.suppress(WireError):
        decode({"$": "fraction", "v": "1e7000000"}, lambda tag: None)
    assert time.monotonic() - start < 1.0


def test_a_docstring_and_the_names_are_the_package_s(pkg: Any, plain: Any) -> None:
    """The stand-in's own docstring once answered ``__doc__`` for every object ("every method is documented"
    passed undocumented code), and ``dir()`` saw only the stand-in."""
    assert pkg.NoDoc().method.__doc__ is None and plain.NoDoc().method.__doc__ is None
    assert pkg.Session.__doc__ == plain.Session.__doc__
    assert "Session" in dir(pkg) and "method" in dir(pkg.NoDoc())


def test_an_environment_variable_set_by_the_test_reaches_the_package(pkg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_CURRENCY", "EUR")
    assert pkg.currency() == "EUR"
    monkeypatch.delenv("SHOP_CURRENCY")
    assert pkg.currency() != "EUR"


def test_seeding_random_makes_the_package_repeatable(pkg: Any) -> None:
    import random

    random.seed(7)
    first = [pkg.roll() for _ in range(3)]
    random.seed(7)
    assert [pkg.roll() for _ in range(3)] == first
    one_process = random.Random(7)
    one_process.randint(1, 10**9)
    random.seed(7)
    pkg.roll()
    assert random.random() == one_process.random()  # the test's next draw continues the stream the package drew from
