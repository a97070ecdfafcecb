"""How engines spell values on their command lines: human-readable integers, switches' words, JSON objects."""

from __future__ import annotations

import json
import re

from servelab.core.errors import UsageError

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(value: str) -> int:
    """vLLM's human-readable integers: 32k = 32,000, 32K = 32,768, 20G = 20 GiB; plain digits as they are."""
    text = str(value).strip()
    match = _HUMAN.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise UsageError(f"{text!r}: decimals are not allowed with the binary suffix {suffix}")
        return int(number) * _BINARY[suffix]
    try:
        return int(float(text)) if "." in text or "e" in text.lower() else int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a number") from None


def truthy(value: str) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def json_object(value: str) -> str:
    """A JSON object given on the command line, as canonical JSON; anything else is refused."""
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise UsageError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError("must be a JSON object, e.g. '{\"attention_chunk_size\": 0}'")
    return json.dumps(data, sort_keys=True)
