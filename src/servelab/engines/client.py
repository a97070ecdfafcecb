"""Streaming client for OpenAI-compatible ``/v1/chat/completions`` and ``/v1/completions``.

Every request ends as one :class:`RequestRecord`; no exception escapes :meth:`StreamClient.send`
except cancellation of the caller's own task.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from servelab.core.records import ErrorClass, Labels, RequestRecord
from servelab.core.urls import api_base
from servelab.engines.interpret import StreamInterpreter
from servelab.engines.sse import EventTooLarge, SSEDecoder
from servelab.engines.transport import (
    ConnectFailed,
    IdleTimeout,
    PeerClosed,
    RequestStamps,
    ResponseStart,
    Segment,
    post_stream,
)

Endpoint = Literal["chat", "completions"]


class Stream(Protocol):
    """An open streamed response as the client reads it (the socket transport's :class:`HTTPStream`, or an
    in-process one a fault test scripts)."""

    start: ResponseStart

    def body(self) -> AsyncIterator[Segment]: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """POSTs a body and returns once the response head is in; raises ConnectFailed, IdleTimeout, PeerClosed."""

    def __call__(
        self,
        url: str,
        body: bytes,
        *,
        headers: dict[str, str],
        stamps: RequestStamps,
        connect_timeout: float,
        read_timeout: float,
    ) -> Awaitable[Stream]: ...


_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_MAX_ERROR_BODY = 2000
# finish_reason values that say the server gave up on the request rather than ended it
ABORTED_REASONS = frozenset({"abort", "aborted", "cancelled", "canceled", "error"})


@dataclass(frozen=True, slots=True)
class ClientOptions:
    connect_timeout: float = 10.0
    read_timeout: float = 120.0  # longest silence allowed between bytes
    include_usage: bool = True
    api_key: str | None = None
    transport: Transport | None = None  # None: the kernel-stamped socket transport


class StreamClient:
    """Sends streamed requests to one target and records what arrives."""

    def __init__(self, base_url: str, *, target: str = "", options: ClientOptions | None = None) -> None:
        self.base = api_base(base_url)
        self.target = target
        self.options = options or ClientOptions()

    def new_record(
        self, endpoint: Endpoint, *, scenario: str = "", request_id: str | None = None, labels: Labels | None = None
    ) -> RequestRecord:
        return RequestRecord(
            request_id=request_id or uuid.uuid4().hex[:16],
            endpoint=endpoint,
            scenario=scenario,
            target=self.target,
            labels=labels if labels is not None else Labels(step=scenario),
        )

    def build_payload(self, endpoint: Endpoint, payload: dict[str, Any]) -> dict[str, Any]:
        body = dict(payload)
        body["stream"] = True
        if self.options.include_usage:
            options = dict(body.get("stream_options") or {})
            options.setdefault("include_usage", True)
            body["stream_options"] = options
        return body

    async def send(
        self,
        endpoint: Endpoint,
        payload: dict[str, Any],
        *,
        record: RequestRecord | None = None,
        scheduled_ns: int | None = None,
    ) -> RequestRecord:
        """Stream one request and return its record, errors included."""
        record = record or self.new_record(endpoint)
        record.model = record.model or str(payload.get("model", ""))
        record.scheduled_ns = scheduled_ns if scheduled_ns is not None else time.perf_counter_ns()
        body = json.dumps(self.build_payload(endpoint, payload)).encode()
        stamps = RequestStamps()
        try:
            await self._exchange(endpoint, body, record, stamps, _ReplyBounds.of(payload))
        except asyncio.CancelledError:
            _fail(record, ErrorClass.CANCELLED, "cancelled by the run")
            raise
        except ConnectFailed as exc:
            _fail(record, ErrorClass.CONNECT, str(exc))
        except IdleTimeout as exc:
            _fail(record, ErrorClass.TIMEOUT, str(exc))
        except PeerClosed as exc:
            _fail(record, ErrorClass.DISCONNECT, str(exc))
        except Exception as exc:  # a bug of ours must not lose the run
            _fail(record, ErrorClass.CLIENT, f"{type(exc).__name__}: {exc}")
        finally:
            record.sent_ns = stamps.sent_ns
            if record.end_ns is None:
                record.end_ns = time.perf_counter_ns()
        return record

    async def _exchange(
        self, endpoint: Endpoint, body: bytes, record: RequestRecord, stamps: RequestStamps, bounds: _ReplyBounds
    ) -> None:
        headers = {"Authorization": f"Bearer {self.options.api_key}"} if self.options.api_key else {}
        stream = await (self.options.transport or post_stream)(
            self.base + _PATHS[endpoint].removeprefix("/v1"),
            body,
            headers=headers,
            stamps=stamps,
            connect_timeout=self.options.connect_timeout,
            read_timeout=self.options.read_timeout,
        )
        try:
            record.http_status = stream.start.status
            record.headers_ns = stream.start.arrived_ns
            record.first_byte_ns = stream.start.first_byte_ns
            if stream.start.status >= 400:
                await _http_error(stream, record)
            else:
                await _read_events(stream, record, bounds)
        finally:
            stream.close()


@dataclass(frozen=True, slots=True)
class _ReplyBounds:
    """How much of a streamed reply is read before the server is said to ignore the request's own limit: a server
    that streams past them would otherwise hold the request (and the run waiting on it) for good."""

    events: int | None  # data events: a few per token at most (role, usage and empty parser deltas included)
    body_bytes: int

    @classmethod
    def of(cls, payload: dict[str, Any]) -> _ReplyBounds:
        tokens = _positive(payload.get("max_tokens")) or _positive(payload.get("max_completion_tokens"))
        if tokens is None:
            return cls(events=None, body_bytes=1 << 30)
        tokens *= _positive(payload.get("n")) or 1
        return cls(events=4 * tokens + 1024, body_bytes=max(64 << 20, 8192 * tokens))


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _http_error(stream: Stream, record: RequestRecord) -> None:
    kind = ErrorClass.HTTP_5XX if stream.start.status >= 500 else ErrorClass.HTTP_4XX
    parts: list[bytes] = []
    kept = 0
    try:
        async for seg in stream.body():
            parts.append(seg.data)
            kept += len(seg.data)
            record.end_ns = seg.arrived_ns
            if kept > _MAX_ERROR_BODY * 32:  # the reason is in its first bytes; an endless error body is not read
                break
    except (IdleTimeout, PeerClosed):
        pass
    text = b"".join(parts).decode("utf-8", errors="replace")[:_MAX_ERROR_BODY]
    _fail(record, kind, f"HTTP {stream.start.status}: {text}".strip())


async def _read_events(stream: Stream, record: RequestRecord, bounds: _ReplyBounds) -> None:
    decoder = SSEDecoder()
    interpreter = StreamInterpreter(record)
    last_ns = stream.start.arrived_ns
    events = body = 0
    try:
        async for seg in stream.body():
            last_ns = seg.arrived_ns
            body += len(seg.data)
            for event in decoder.feed(seg.data, seg.arrived_ns):
                interpreter.apply(event)
                events += 1
            if record.error is None and (over := _past(bounds, events, body)):
                _fail(record, ErrorClass.MALFORMED, over)
            if record.error is not None:
                return
        for event in decoder.flush(last_ns):
            interpreter.apply(event)
    except EventTooLarge as exc:
        _fail(record, ErrorClass.MALFORMED, str(exc))
    finally:
        interpreter.finish()
        record.end_ns = last_ns
    _check_complete(stream, record, interpreter)


def _past(bounds: _ReplyBounds, events: int, body: int) -> str | None:
    if bounds.events is not None and events > bounds.events:
        return f"the server streamed {events:,} events, past what max_tokens allows: it ignores the limit"
    if body > bounds.body_bytes:
        return f"the server streamed over {bounds.body_bytes:,} bytes for one reply: it ignores the limit"
    return None


def _check_complete(stream: Stream, record: RequestRecord, interpreter: StreamInterpreter) -> None:
    if record.error is not None:
        return
    content_type = stream.start.headers.get("content-type", "")
    if "text/event-stream" not in content_type:
        _fail(record, ErrorClass.MALFORMED, f"expected text/event-stream, got {content_type or 'no type'!r}")
    elif (record.finish_reason or "").lower() in ABORTED_REASONS:
        # vLLM and SGLang end the requests they drop (a shutdown, a KV-transfer failure) with a clean-looking
        # stream: a chunk with finish_reason "abort", then [DONE]. The reply is cut, not finished.
        _fail(record, ErrorClass.STREAM_ERROR, f"the server aborted the reply (finish_reason {record.finish_reason!r})")
    elif not interpreter.done and record.finish_reason is None:
        _fail(record, ErrorClass.DISCONNECT, "stream ended without [DONE] or a finish_reason")


def _fail(record: RequestRecord, kind: ErrorClass, detail: str) -> None:
    if record.error is None:
        record.error = kind
        record.error_detail = detail
