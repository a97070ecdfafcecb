"""Numbers read as the engine reads them, or not counted.

The gateway parses bodies with orjson, which reads an integer past 64 bits as a float (a 300-digit integer becomes
``1e+299``); the engine's Python ``json`` keeps it whole, and a template's ``tojson`` prints every digit. Rule: a
value orjson may have read inexactly (a float of magnitude 2**63 or more: it may stand for a longer integer) makes
the request uncountable. Such a float needs a run of at least 19 digits in the text, so only a text that has one
is walked."""

from __future__ import annotations

import re
from typing import Any

import orjson

from servelab.gateway.admission.errors import Uncountable

LONG_DIGITS = re.compile(rb"\d{19}")
LONG_DIGITS_TEXT = re.compile(r"\d{19}")
INEXACT = 2.0**63


def check_numbers(raw: bytes, value: Any) -> None:
    """:class:`Uncountable` where ``value`` (parsed from ``raw``) holds a number orjson may have read inexactly."""
    if LONG_DIGITS.search(raw):
        _walk(value)


def loads_exact(text: str) -> Any:
    """``text`` parsed (a tool call's arguments), refused where a number in it may have been read inexactly."""
    value = orjson.loads(text)
    if LONG_DIGITS_TEXT.search(text):
        _walk(value)
    return value


def _walk(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and abs(item) >= INEXACT:
            raise Uncountable("a number in the body is past what the gateway's parser reads exactly (over 2**63)")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
