"""Reading a client's JSON body strictly: anything the gateway cannot take is a 400 with a reason, never a 500.

orjson refuses what JSON does not allow (NaN, Infinity, numbers that overflow a double, lone surrogates,
invalid UTF-8); nesting is bounded (``max_depth``: checked in C-speed byte counts first, walked only when
the body has more brackets than that); the few fields the gateway itself reads must have their types."""

from __future__ import annotations

from typing import Any

import orjson

FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "stream": (bool,),
    "stream_options": (dict, type(None)),
    "messages": (list,),
    "prompt": (str, list),
    "tools": (list, type(None)),
}


class BadBody(ValueError):
    """The body cannot be taken; the message says why (it becomes the 400's message)."""


def parse_body(raw: bytes, max_depth: int) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadBody(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadBody("the request body is not a JSON object")
    if raw.count(b"[") + raw.count(b"{") > max_depth and _depth(body) > max_depth:
        raise BadBody(f"the request body nests deeper than {max_depth} levels")
    for name, types in FIELD_TYPES.items():
        if name in body and not isinstance(body[name], types):
            raise BadBody(f"{name} must be {' or '.join(_type_name(t) for t in types)}")
    return body


def _depth(value: Any) -> int:
    """The deepest nesting of lists and objects, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level)
        stack += [(child, level + 1) for child in item if isinstance(child, dict | list)]
    return deepest


def _type_name(kind: type) -> str:
    return {str: "a string", bool: "true or false", dict: "an object", list: "an array", type(None): "null"}[kind]


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)
