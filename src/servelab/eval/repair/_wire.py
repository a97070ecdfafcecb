"""Plain data between the test process and the process that imports the graded package (one JSON line each way).

The rule this module keeps: :func:`decode` builds only ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, ``Decimal``, ``Fraction``, ``complex``, ``datetime``,
``date``, ``time``, ``timedelta``, ``collections.Counter``, ``collections.OrderedDict``, ``collections.defaultdict``
(its factory one of :data:`FACTORIES`, by name), named tuples of classes it makes itself (from names only), what
``ref`` makes of a handle (a number naming an object that stays in the other process) or of a shared container (a
number naming one of the receiver's own containers, :mod:`._shared`) and what ``exc_class`` makes of an exception
class (a class of the receiver's own making). Nothing that comes out of it has an ``__eq__``,
``__hash__`` or ``__repr__`` of the sender's making, whatever bytes the sender wrote: the sender may be the graded
code itself.

What :func:`encode` sends as a value: those exact types, named tuples, and, with ``as_base`` (the package's own
loop, honest), an instance of a subclass of one of them that behaves as its base type does (:func:`plain_base`:
its class adds attributes of its own but changes none of the base's, a few reviewed ``enum`` ones aside), as the
value of that base type, read with the base type's own methods. Anything else goes to ``other`` (a handle). A
sender that lies here gains nothing: it could have sent the same plain value from honest code.

Standard library only: inside the sandbox this source runs as part of a ``python -c`` program, not as a file.
"""

from __future__ import annotations

import collections
import datetime as dt
import enum
import json
import re
import sys
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

MAX_DEPTH = 64
MAX_TEXT = 1 << 20  # characters of one value sent as text (a Decimal, a date; bytes are bound by the message)
MAX_MESSAGE = 16 << 20  # bytes of one message; the package's loop answers an error in place of a longer one
_INT_LIMIT = 10 ** sys.get_int_max_str_digits() if sys.get_int_max_str_digits() else None  # ints json writes
_FRACTION = re.compile(r"-?[0-9]+(/[0-9]+)?")  # as Fraction.__str__ writes one (an exponent would be costly)
MAX_FIELDS = 64
MAX_NAMED = 1000  # named tuple classes one process makes
SPECIAL_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_SCALARS = (bool, int, str)
# values sent as text: tag -> (exact type, to text, from text)
TEXT: dict[str, tuple[type, Callable[[Any], str], Callable[[str], Any]]] = {
    "bytes": (bytes, bytes.hex, bytes.fromhex),
    "decimal": (Decimal, Decimal.__str__, Decimal),
    "fraction": (Fraction, Fraction.__str__, Fraction),
    "complex": (complex, complex.__repr__, complex),
    "datetime": (dt.datetime, dt.datetime.isoformat, dt.datetime.fromisoformat),
    "date": (dt.date, dt.date.isoformat, dt.date.fromisoformat),
    "time": (dt.time, dt.time.isoformat, dt.time.fromisoformat),
    "timedelta": (dt.timedelta, lambda d: f"{d.days},{d.seconds},{d.microseconds}",
                  lambda t: dt.timedelta(*map(int, t.split(",")))),
}  # fmt: skip
_TAG_OF = {kind: tag for tag, (kind, _, _) in TEXT.items()}
_NAMED: dict[tuple[str, tuple[str, ...]], type] = {}
# dicts of the standard library sent as themselves: class -> tag (a Counter compares as a Counter, an OrderedDict
# by order with another OrderedDict, a defaultdict fills a missing key; as a dict none of that would hold)
_DICTS: dict[type, str] = {dict: "dict", collections.Counter: "Counter", collections.OrderedDict: "OrderedDict",
                           collections.defaultdict: "defaultdict"}  # fmt: skip
# a defaultdict's factory, by name: only these (classes of the receiver's own) travel
FACTORIES: dict[str, type] = {k.__name__: k for k in (int, float, complex, str, bytes, bool, list, tuple, dict, set,
                              frozenset, Decimal, Fraction, collections.Counter, collections.OrderedDict)}  # fmt: skip
BASES: tuple[type, ...] = (*_SCALARS, float, list, tuple, set, frozenset, *_DICTS, *_TAG_OF)
MUTABLE_BASES: tuple[type, ...] = (list, set, *_DICTS)  # shared by number where a ``share`` table is given
KEYED: tuple[type, ...] = (set, frozenset, *_DICTS)  # containers whose keys the receiver hashes
# what a subclass may define without changing how its instances behave as values: class bookkeeping, construction
_INERT = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__", "__annotations__",
                    "__init__", "__new__", "__init_subclass__", "__class_getitem__", "__orig_bases__", "__parameters__",
                    "__firstlineno__", "__static_attributes__", "__type_params__", "__abstractmethods__",
                    "__subclasshook__", "__match_args__", "_abc_impl"})  # fmt: skip
# what the enum module's classes define on a member: its repr, copying (a member copies as itself), pickling, dir()
_ENUM_NAMES = frozenset(
    {"__repr__", "__copy__", "__deepcopy__", "__reduce_ex__", "__dir__", "__init__", "__new__", "__new_member__"}
)
_ENUMS = tuple(getattr(enum, n) for n in ("Enum", "ReprEnum", "IntEnum", "StrEnum") if hasattr(enum, n))


class WireError(ValueError):
    """A message that is not plain data as this module defines it."""


def encode(
    value: Any, other: Callable[[Any], dict[str, Any]], depth: int = 0, as_base: bool = False, share: Any = None
) -> Any:
    """``value`` as JSON-ready plain data; ``other(v)`` says what to send for anything else (a handle, or raise).
    With ``as_base``, an instance of a subclass of a plain type that :func:`plain_base` accepts goes as its base.
    With ``share`` (a ``_shared.Shared``), a mutable container goes as the number that table gives it (its contents
    travel in the message's shared state)."""
    if depth > MAX_DEPTH:
        raise WireError("nested too deep")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind not in BASES and isinstance(value, tuple) and _named_fields(kind) is not None:
        items = [encode(v, other, depth + 1, as_base, share) for v in tuple.__iter__(value)]
        return {"$": "namedtuple", "name": kind.__name__, "fields": list(kind._fields), "v": items}
    base = kind if kind in BASES else plain_base(value) if as_base else None
    if base is None or (base is collections.defaultdict and _factory(value) is False):
        return other(value)
    if base in KEYED and not _plain_keys(base, value, depth, as_base):
        return other(value)  # a key the test process could not hash (a handle): the container stays there
    if share is not None and base in MUTABLE_BASES:
        return share.ref(value, base)
    return _as(base, value, other, depth, as_base, share)


class _KeyIsHandle(Exception):
    """A key that would go as a handle."""


def _no_handle(value: Any) -> dict[str, Any]:
    raise _KeyIsHandle


def _plain_keys(base: type, value: Any, depth: int, as_base: bool) -> bool:
    """Whether every key of a dict (every item of a set) goes as plain data, so the receiver can hash it."""
    keys: Any = dict.keys(value) if base in _DICTS else getattr(base, "__iter__")(value)  # noqa: B009
    try:
        for key in keys:
            encode(key, _no_handle, depth + 1, as_base)
    except _KeyIsHandle:
        return False
    return True


def _as(
    base: type, value: Any, other: Callable[[Any], dict[str, Any]], depth: int, as_base: bool, share: Any = None
) -> Any:
    """``value`` (an instance of ``base`` or of a subclass :func:`plain_base` accepts) as plain data, read with
    ``base``'s own methods, never one of its class's."""

    def inner(item: Any) -> Any:
        return encode(item, other, depth + 1, as_base, share)

    if base is int:
        whole = int.__index__(value)
        if _INT_LIMIT is not None and abs(whole) >= _INT_LIMIT:  # json would refuse to write it: say so here
            raise WireError(f"an int of over {sys.get_int_max_str_digits()} digits")
        return whole
    if base is str:
        return str.__str__(value)
    if base is float:
        number = float.__float__(value)
        return number if number == number and abs(number) != float("inf") else {"$": "float", "v": repr(number)}
    if base is list:
        return [inner(v) for v in list.__iter__(value)]
    if base in (tuple, set, frozenset):
        return {"$": base.__name__, "v": [inner(v) for v in base.__iter__(value)]}
    if base in _DICTS:
        items = collections.OrderedDict.items if base is collections.OrderedDict else dict.items
        tagged: dict[str, Any] = {"$": _DICTS[base], "v": [[inner(k), inner(v)] for k, v in items(value)]}
        if base is collections.defaultdict:
            tagged["factory"] = _factory(value)
        return tagged
    tag = _TAG_OF[base]
    text = TEXT[tag][1](value)
    if tag != "bytes" and len(text) > MAX_TEXT:
        raise WireError(f"a {tag} of over {MAX_TEXT} characters")  # honest: an error for the test, not tampering
    return {"$": tag, "v": text}


def contents(value: Any, base: type, other: Callable[[Any], dict[str, Any]], as_base: bool, share: Any) -> Any:
    """A shared container's own items as plain data (the containers in it by their numbers in ``share``); an error
    where a key became one the receiver could not hash (the container was plain data when it first crossed)."""
    if base in KEYED and not _plain_keys(base, value, 0, as_base):
        raise WireError(f"a shared {base.__name__} now holds a key that is not plain data")
    return _as(base, value, other, 0, as_base, share)


def _factory(value: Any) -> str | bool | None:
    """The name of a defaultdict's factory, None for none, False for one that is not in :data:`FACTORIES`."""
    made = vars(collections.defaultdict)["default_factory"].__get__(value)
    if made is None:
        return None
    return next((name for name, kind in FACTORIES.items() if kind is made), False)


def lookup(kind: type, name: str) -> Any:
    """What ``kind``'s instances get for the special method ``name``: the first entry in its MRO, None if none."""
    for k in kind.__mro__:
        if name in vars(k):
            return vars(k)[name]
    return None


def plain_base(value: Any) -> type | None:
    """The plain type of :data:`BASES` that ``value``, an instance of a subclass of it, behaves exactly as, or None.

    It does when every attribute its class resolves otherwise than the base is bookkeeping or construction
    (``_INERT``), a name the base has not and that is no special method (the test then gets AttributeError: it
    fails, it never passes), or one of the reviewed ``enum`` names (a member of an ``IntEnum`` or a ``StrEnum`` is
    its value; only its repr differs); and its own ``__dict__`` hides none of the base's attributes. A class that
    defines ``__eq__``, ``__hash__``, ``__len__``, ``__iter__``, ``__missing__``, ``__repr__``, ``keys`` or any other
    of the base's behaviour is not plain: its instance goes as a handle, and the test process never lets its
    methods decide a comparison."""
    kind = type(value)
    base = next((k for k in kind.__mro__ if k in BASES), None)
    if base is None:
        return None
    for k in kind.__mro__:
        if k in base.__mro__:
            continue
        for name in vars(k):
            owner = next(c for c in kind.__mro__ if name in vars(c))
            if owner in base.__mro__ or name in _INERT or vars(owner)[name] is lookup(base, name):
                continue
            if owner in _ENUMS and (name in _ENUM_NAMES or _same_text(base, name, vars(owner)[name])):
                continue
            if not (name.startswith("__") and name.endswith("__")) and not hasattr(base, name):
                continue
            return None
    own = getattr(value, "__dict__", None)
    if own is not None and (type(own) is not dict or any(type(n) is not str or hasattr(base, n) for n in own)):
        return None
    return base


def _same_text(base: type, name: str, method: Any) -> bool:
    """Whether ``method`` as ``__str__`` gives the base's text: the base's repr where its str is its repr (an
    ``IntEnum``'s str is ``int.__repr__``)."""
    return name == "__str__" and method is lookup(base, "__repr__") and lookup(base, "__str__") is object.__str__


def _named_fields(kind: type) -> tuple[str, ...] | None:
    """The fields of a named tuple class (identifiers, not dunder), or None."""
    fields = getattr(kind, "_fields", None)
    if type(fields) is not tuple or len(fields) > MAX_FIELDS or len(set(fields)) != len(fields):
        return None
    ok = all(type(f) is str and f.isidentifier() and not f.startswith("_") for f in fields)
    return fields if ok else None


def decode(data: Any, ref: Callable[[dict[str, Any]], Any], depth: int = 0) -> Any:
    """Plain data from what :func:`encode` sent (``ref`` turns a ``ref`` or ``exc_class`` tag into a value);
    :class:`WireError` for anything else."""
    if depth > MAX_DEPTH:
        raise WireError("nested too deep")
    kind = type(data)
    if data is None or kind in _SCALARS or kind is float:
        return data
    if kind is list:
        return [decode(v, ref, depth + 1) for v in data]
    if kind is not dict or type(data.get("$")) is not str:
        raise WireError(f"not plain data: {type(data).__name__}")
    return _tagged(data, ref, depth)


def _tagged(data: dict[str, Any], ref: Callable[[dict[str, Any]], Any], depth: int) -> Any:
    tag = data["$"]
    raw: Any = data.get("v")
    try:
        if tag in ("tuple", "set", "frozenset", *_DICT_TAGS) and type(raw) is not list:
            raise WireError(f"{tag} without items")
        if tag == "tuple":
            return tuple(decode(v, ref, depth + 1) for v in raw)
        if tag in ("set", "frozenset"):
            items = (decode(v, ref, depth + 1) for v in raw)
            return set(items) if tag == "set" else frozenset(items)
        if tag in _DICT_TAGS:
            return _dict(tag, [(decode(k, ref, depth + 1), decode(v, ref, depth + 1)) for k, v in map(_pair, raw)],
                         data.get("factory"))  # fmt: skip
        if (tag in TEXT or tag == "float") and (type(raw) is not str or (tag != "bytes" and len(raw) > MAX_TEXT)):
            raise WireError(f"{tag} without its text")
        if tag == "fraction" and not _FRACTION.fullmatch(raw):
            raise WireError("a fraction not written as n/d")
        if tag in TEXT:
            return TEXT[tag][2](raw)
        if tag == "float":
            return SPECIAL_FLOATS[raw]
        if tag == "namedtuple" and type(raw) is list:
            return _named(data.get("name"), data.get("fields"))(*(decode(v, ref, depth + 1) for v in raw))
    except WireError:
        raise
    except (TypeError, ValueError, KeyError, ArithmeticError) as exc:
        raise WireError(f"bad {tag}: {type(exc).__name__}") from None
    if tag in ("ref", "exc_class", "shared"):
        return ref(data)
    raise WireError(f"unknown tag {tag[:40]!r}")


_DICT_TAGS = tuple(_DICTS.values())


def _dict(tag: str, pairs: list[tuple[Any, Any]], factory: Any) -> dict[Any, Any]:
    """The receiver's own dict, Counter, OrderedDict or defaultdict (with a factory of :data:`FACTORIES`)."""
    if tag == "OrderedDict":
        return collections.OrderedDict(pairs)
    plain = dict(pairs)
    if tag == "Counter":
        return collections.Counter(plain)
    if tag == "defaultdict":
        if factory is not None and (type(factory) is not str or factory not in FACTORIES):
            raise WireError("a defaultdict whose factory is not a plain type")
        return collections.defaultdict(FACTORIES[factory] if factory else None, plain)
    return plain


def _named(name: Any, fields: Any) -> type:
    """A named tuple class of this process for ``name`` and ``fields`` (made once each)."""
    if type(name) is not str or not name.isidentifier() or type(fields) is not list or len(fields) > MAX_FIELDS:
        raise WireError("a named tuple without a name or fields")
    if len(_NAMED) >= MAX_NAMED:
        raise WireError("too many named tuple classes")
    key = (name, tuple(fields))
    if key not in _NAMED:
        made = collections.namedtuple(name, fields)  # type: ignore[misc]  # ValueError for bad names: caught
        if _named_fields(made) is None:
            raise WireError("a named tuple with odd fields")
        _NAMED[key] = made
    return _NAMED[key]


def _pair(item: Any) -> tuple[Any, Any]:
    if type(item) is not list or len(item) != 2:
        raise WireError("a dict item that is not a pair")
    return item[0], item[1]


def dumps(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, allow_nan=False, separators=(",", ":")) + "\n").encode()


def loads(line: bytes) -> dict[str, Any]:
    """One message: a JSON object, strict (no NaN literals, no duplicate-key tricks matter: last wins)."""
    try:
        message = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"unreadable message: {type(exc).__name__}") from None
    if type(message) is not dict:
        raise WireError("a message that is not an object")
    return message


def _no_constant(name: str) -> Any:
    raise WireError(f"{name} is not plain JSON")
