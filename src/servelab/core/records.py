"""The flat per-request record every figure is computed from.

All ``*_ns`` fields are ``time.perf_counter_ns()`` readings on the client, taken when the
bytes arrived at the socket, before any parsing. ``None`` means "did not happen".
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class ErrorClass(enum.StrEnum):
    """Why a request did not end normally. ``None`` on a record means it did."""

    CONNECT = "connect"  # connection refused / DNS / TLS handshake
    TIMEOUT = "timeout"  # no byte (or no further byte) within the limit
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    DISCONNECT = "disconnect"  # the server closed the stream before [DONE] / end of body
    MALFORMED = "malformed"  # SSE or JSON the client could not understand
    STREAM_ERROR = "stream_error"  # an in-band {"error": ...} event
    CANCELLED = "cancelled"  # the run stopped the request
    CLIENT = "client"  # a bug on our side, kept as data rather than raised


@dataclass(slots=True)
class RequestRecord:
    """One request, as the client saw it."""

    request_id: str
    endpoint: str  # "chat" or "completions"
    scenario: str = ""
    target: str = ""
    model: str = ""
    # timestamps, perf_counter_ns
    scheduled_ns: int | None = None
    sent_ns: int | None = None
    headers_ns: int | None = None
    first_byte_ns: int | None = None
    first_token_ns: int | None = None  # first token of any kind: reasoning, content or tool call
    first_content_ns: int | None = None
    end_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)  # one per SSE event that carried a token delta
    # what came back
    http_status: int | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None  # server usage
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    reasoning_tokens: int | None = None
    client_token_count: int = 0  # token-bearing deltas counted by the client (a cross-check)
    output_text: str = ""
    reasoning_text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    server_timings: dict[str, Any] | None = None  # llama.cpp's `timings`
    error: ErrorClass | None = None
    error_detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["error"] = self.error.value if self.error else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        data = dict(data)
        err = data.get("error")
        data["error"] = ErrorClass(err) if err else None
        return cls(**data)
