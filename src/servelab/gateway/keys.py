"""A request's bearer key checked against the configured keys (in constant time; an empty key never matches).

The keys are encoded once (:class:`KeyRing`); the check reads the request head's bytes as they came, so a request is
judged on its head, before any of its body is read, at the cost of one compare per key."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from servelab.gateway.messages import Request

BEARER = b"bearer "


class KeyRing:
    """Bearer keys, encoded once."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.encoded = tuple(key.encode() for key in keys)

    def __bool__(self) -> bool:
        return bool(self.encoded)

    def admits(self, headers: dict[bytes, bytes]) -> bool:
        """The head's ``Authorization: Bearer KEY`` names one of the keys (compared in constant time)."""
        value = headers.get(b"authorization", b"")
        if value[:7].lower() != BEARER:
            return False
        given = value[7:].strip()
        return bool(given) and any(hmac.compare_digest(given, key) for key in self.encoded)


def key_in(request: Request, keys: list[str]) -> bool:
    """The request's bearer key is one of ``keys`` (compared in constant time; an empty key never matches)."""
    return KeyRing(keys).admits(request.headers)
