"""Plain data between the test process and the process that imports the graded package (one JSON line each way).

The rule this module keeps: :func:`decode` builds only ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, ``Decimal``, ``Fraction``, ``complex``, ``datetime``,
``date``, ``time``, ``timedelta``, named tuples of classes it makes itself (from names only), what ``ref`` makes
of a handle (a number naming an object that stays in the other process) and what ``exc_class`` makes of an
exception class (a class of the receiver's own making). Nothing that comes out of it has an ``__eq__``,
``__hash__`` or ``__repr__`` of the sender's making, whatever bytes the sender wrote: the sender may be the graded
code itself. Only exact types are sent as values (a subclass of ``int`` goes as a handle), named tuples aside.

Standard library only: inside the sandbox this source runs as part of a ``python -c`` program, not as a file.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

MAX_DEPTH = 64
MAX_TEXT = 1 << 16  # characters of one value sent as text (a Decimal, a date)
MAX_FIELDS = 64
MAX_NAMED = 1000  # named tuple classes one process makes
SPECIAL_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_SCALARS = (bool, int, str)
# values sent as text: tag -> (exact type, to text, from text)
TEXT: dict[str, tuple[type, Callable[[Any], str], Callable[[str], Any]]] = {
    "bytes": (bytes, bytes.hex, bytes.fromhex),
    "decimal": (Decimal, str, Decimal),
    "fraction": (Fraction, str, Fraction),
    "complex": (complex, repr, complex),
    "datetime": (dt.datetime, dt.datetime.isoformat, dt.datetime.fromisoformat),
    "date": (dt.date, dt.date.isoformat, dt.date.fromisoformat),
    "time": (dt.time, dt.time.isoformat, dt.time.fromisoformat),
    "timedelta": (dt.timedelta, lambda d: f"{d.days},{d.seconds},{d.microseconds}",
                  lambda t: dt.timedelta(*map(int, t.split(",")))),
}  # fmt: skip
_TAG_OF = {kind: tag for tag, (kind, _, _) in TEXT.items()}
_NAMED: dict[tuple[str, tuple[str, ...]], type] = {}


class WireError(ValueError):
    """A message that is not plain data as this module defines it."""


def encode(value: Any, other: Callable[[Any], dict[str, Any]], depth: int = 0) -> Any:
    """``value`` as JSON-ready plain data; ``other(v)`` says what to send for anything else (a handle, or raise)."""
    if depth > MAX_DEPTH:
        raise WireError("nested too deep")
    kind = type(value)
    if value is None or kind in _SCALARS:
        return value
    if kind is float:
        return value if value == value and abs(value) != float("inf") else {"$": "float", "v": repr(value)}
    if kind is list:
        return [encode(v, other, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        return {"$": kind.__name__, "v": [encode(v, other, depth + 1) for v in value]}
    if kind is dict:
        pairs = [[encode(k, other, depth + 1), encode(v, other, depth + 1)] for k, v in value.items()]
        return {"$": "dict", "v": pairs}
    if kind in _TAG_OF:
        return {"$": _TAG_OF[kind], "v": TEXT[_TAG_OF[kind]][1](value)}
    if isinstance(value, tuple) and _named_fields(kind) is not None:
        items = [encode(v, other, depth + 1) for v in tuple.__iter__(value)]
        return {"$": "namedtuple", "name": kind.__name__, "fields": list(kind._fields), "v": items}
    return other(value)


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
        if tag in ("tuple", "set", "frozenset", "dict") and type(raw) is not list:
            raise WireError(f"{tag} without items")
        if tag == "tuple":
            return tuple(decode(v, ref, depth + 1) for v in raw)
        if tag in ("set", "frozenset"):
            items = (decode(v, ref, depth + 1) for v in raw)
            return set(items) if tag == "set" else frozenset(items)
        if tag == "dict":
            return {decode(k, ref, depth + 1): decode(v, ref, depth + 1) for k, v in (_pair(p) for p in raw)}
        if (tag in TEXT or tag == "float") and (type(raw) is not str or len(raw) > MAX_TEXT):
            raise WireError(f"{tag} without its text")
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
    if tag in ("ref", "exc_class"):
        return ref(data)
    raise WireError(f"unknown tag {tag[:40]!r}")


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
