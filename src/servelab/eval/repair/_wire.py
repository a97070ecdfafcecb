"""Plain data between the test process and the process that imports the graded package (one JSON line each way).

The rule this module keeps: :func:`decode` builds only ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, ``Decimal``, what ``ref`` makes of a handle (a number
naming an object that stays in the other process) and what ``exc_class`` makes of an exception class (a class
of the receiver's own making). Nothing that comes out of it has an ``__eq__``, ``__hash__`` or ``__repr__`` of the
sender's making, whatever bytes the sender wrote: the sender may be the graded code itself.

Standard library only: inside the sandbox this source runs as part of a ``python -c`` program, not as a file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

MAX_DEPTH = 64
MAX_TEXT = 1 << 16  # characters of one Decimal or float literal
SPECIAL_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_SCALARS = (bool, int, str)


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
    if kind is bytes:
        return {"$": "bytes", "v": value.hex()}
    if kind is Decimal:
        return {"$": "decimal", "v": str(value)}
    return other(value)


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
        if tag in ("bytes", "decimal", "float") and (type(raw) is not str or len(raw) > MAX_TEXT):
            raise WireError(f"{tag} without its text")
        if tag == "bytes":
            return bytes.fromhex(raw)
        if tag == "decimal":
            return Decimal(raw)
        if tag == "float":
            return SPECIAL_FLOATS[raw]
    except (TypeError, ValueError, KeyError, ArithmeticError) as exc:
        raise WireError(f"bad {tag}: {type(exc).__name__}") from None
    if tag in ("ref", "exc_class"):
        return ref(data)
    raise WireError(f"unknown tag {tag[:40]!r}")


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
