"""Why a request failed, in the words a person acts on: the server's own message, classed (context too long, auth,
rate limit, unknown model, bad request, server error, timeout, connect, disconnect, ...). Every figure says how
many of its requests failed and why, so none rests on failed requests unnoticed."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from servelab.core.records import ErrorClass, RequestRecord

CONTEXT = "context too long"
AUTH = "auth"
RATE_LIMIT = "rate limit"
UNKNOWN_MODEL = "unknown model"
BAD_REQUEST = "bad request"
SERVER = "server error"
_BY_CLASS = {
    ErrorClass.CONNECT: "connect",
    ErrorClass.TIMEOUT: "timeout",
    ErrorClass.DISCONNECT: "disconnected",
    ErrorClass.MALFORMED: "malformed stream",
    ErrorClass.STREAM_ERROR: SERVER,
    ErrorClass.CANCELLED: "cancelled",
    ErrorClass.CLIENT: "client error",
    ErrorClass.HTTP_5XX: SERVER,
}
# how engines say a prompt does not fit: vLLM ("maximum context length", "longer than the maximum model length"),
# llama.cpp ("exceeds the available context size", exceed_context_size_error), SGLang, TGI, OpenAI
_CONTEXT_WORDS = ("context length", "maximum model length", "context size", "context window", "too many tokens",
                  "input is too long", "prompt is too long", "exceed_context_size", "context_length_exceeded",
                  "max_model_len")  # fmt: skip
MESSAGE_CHARS = 300


def error_message(body: str) -> str:
    """The server's own words: ``error.message`` (or ``message``, ``detail``) of a JSON error body, else the text."""
    text = body.strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:MESSAGE_CHARS]
    found = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(found, dict):
        found = found.get("message") or found.get("detail") or found.get("msg") or found
    return (found if isinstance(found, str) else json.dumps(found))[:MESSAGE_CHARS]


def reason_of(error: ErrorClass) -> str:
    """The reason a failure of this class is filed under (one that carries no server message)."""
    return _BY_CLASS.get(error, error.value)


def server_message(record: RequestRecord) -> str:
    return error_message(record.error_detail or "")


def reason(record: RequestRecord) -> str | None:
    """The class of a failed request's failure; None for a request that did not fail."""
    if record.error is None:
        return None
    message = server_message(record).lower()
    if any(word in message for word in _CONTEXT_WORDS):
        return CONTEXT
    status = record.http_status
    if status in (401, 403):
        return AUTH
    if status == 429:
        return RATE_LIMIT
    if status == 404 or (status == 400 and "model" in message and "not exist" in message):
        return UNKNOWN_MODEL
    if record.error is ErrorClass.HTTP_4XX:
        return BAD_REQUEST
    return _BY_CLASS.get(record.error, record.error.value)


def classify(records: Sequence[RequestRecord]) -> tuple[dict[str, int], dict[str, str]]:
    """Failed requests per reason (the most common first) and one server message per reason (the first seen), in
    one pass."""
    counts: Counter[str] = Counter()
    said: dict[str, str] = {}
    for r in records:
        why = reason(r)
        if why is not None:
            counts[why] += 1
            said.setdefault(why, server_message(r) or (r.error.value if r.error else ""))
    return dict(counts.most_common()), said


def failures(records: Sequence[RequestRecord]) -> dict[str, int]:
    return classify(records)[0]


def examples(records: Sequence[RequestRecord]) -> dict[str, str]:
    return classify(records)[1]


def failure_text(counts: dict[str, int], said: dict[str, str], n: int) -> str:
    """``3 of 5 failed: context too long (3): This model's maximum context length is ...``"""
    failed = sum(counts.values())
    if not failed:
        return ""
    parts = [f"{why} ({k})" + (f': "{said[why]}"' if said.get(why) else "") for why, k in counts.items()]
    return f"{failed} of {n} failed: " + "; ".join(parts)
