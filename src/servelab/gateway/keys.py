"""A request's bearer key checked against the configured keys (in constant time; an empty key never matches)."""

from __future__ import annotations

import hmac

from servelab.gateway.messages import Request


def bearer(request: Request) -> str | None:
    value = request.header(b"authorization")
    return value[7:].strip() if value[:7].lower() == "bearer " else None


def key_in(request: Request, keys: list[str]) -> bool:
    """The request's bearer key is one of ``keys`` (compared in constant time; an empty key never matches)."""
    given = bearer(request)
    if not given:
        return False
    return any(hmac.compare_digest(given.encode(), key.encode()) for key in keys)
