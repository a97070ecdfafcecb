"""The gateway's own HTTP/1.1 server: an asyncio protocol over httptools' parser, doing as little as possible per
request and per chunk, with the limits a proxy in front of a realtime stack needs.

- Limits, all in the config (``[server]``): the head must arrive within ``header_timeout_s``, be at most
  ``max_header_bytes`` with at most ``max_headers`` fields (431 otherwise); the body may not pause longer
  than ``body_timeout_s`` between reads nor exceed ``max_body_bytes`` (413); an idle keep-alive connection
  is closed after ``keepalive_s``; at most ``max_connections`` are open at once (more are closed at once); a
  closed connection whose client does not take what is left to send is dropped after ``keepalive_s`` more.
  One timer per server sweeps every connection's deadline (within an eighth of it, at most a second late):
  a request costs no timer, a read one clock store.
- A request with both Content-Length and Transfer-Encoding, several Content-Length values, or an upgrade is
  refused (400) and the connection closed. Requests are answered in order, one at a time per connection.
- The handler gets the whole body; a client that goes away cancels its handler's task, so whatever it was
  waiting on (an upstream request) is let go at once. Streams go out chunked (as they are to an HTTP/1.0
  client), one write per piece, through the request's :class:`Outlet`: a handler may write them itself from
  any callback (the gateway's relay does, from its upstream's reads) and answer :class:`Sent`.
- Nothing of the request is reflected in a response that the handler did not write.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httptools
import orjson

from servelab.gateway.access import access_line
from servelab.gateway.outlet import Outlet
from servelab.gateway.poll import BusyPoll

REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 413: "Payload Too Large",
           429: "Too Many Requests", 431: "Request Header Fields Too Large", 499: "Client Closed Request",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
           504: "Gateway Timeout"}  # fmt: skip


@dataclass(frozen=True)
class ServerLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_s: float = 75.0
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    max_body_bytes: int = 16 * 2**20
    max_connections: int = 10_000
    max_pipelined: int = 8
    access_log: bool = False  # one line per request when its answer is over (:mod:`.access`)


@dataclass
class Request:
    method: str
    path: str
    query: bytes
    headers: dict[bytes, bytes]  # lower-case names; a repeated field keeps its last value
    body: bytes = b""
    keep_alive: bool = True
    http10: bool = False  # an HTTP/1.0 client: no chunked encoding, the connection closes after the answer
    outlet: Outlet | None = None  # the handler's direct line to the client (streams, keep-alive comments)

    def header(self, name: bytes) -> str:
        return self.headers.get(name, b"").decode("latin-1")


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "application/json"


@dataclass
class StreamResponse:
    status: int
    chunks: AsyncIterator[bytes]
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "text/event-stream"


@dataclass
class Sent:
    """The handler wrote its response through the request's outlet."""


Handler = Callable[[Request], Awaitable[Response | StreamResponse | Sent]]


if sys.version_info >= (3, 12):

    def _start(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run the handler at once, in this read callback, up to its first wait (its upstream's answer)."""
        return asyncio.Task(work, loop=loop, eager_start=True)

else:

    def _start(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return loop.create_task(work)


class _Refuse(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Connection(asyncio.Protocol):
    def __init__(self, handler: Handler, limits: ServerLimits, live: set[Connection], poll: BusyPoll) -> None:
        self.handler, self.limits, self.live, self.poll = handler, limits, live, poll
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.current: Outlet | None = None  # the outlet of the request being answered
        self._drain: asyncio.Future[None] | None = None
        self._reset_request()
        self.deadline_kind = "header"  # header: since the request began; body: since the last read; idle
        self.mark = self.loop.time()

    # ---- connection -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes
        self.live.add(self)
        if len(self.live) > self.limits.max_connections:
            self.transport.abort()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.live.discard(self)
        if self.task and not self.task.done():
            self.task.cancel()  # the client left: the handler lets go of its upstream
        if self._drain and not self._drain.done():
            self._drain.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.deadline_kind == "body":
            self.mark = self.loop.time()
        elif self.deadline_kind == "idle":
            self.deadline_kind, self.mark = "header", self.loop.time()
        try:
            self.parser.feed_data(data)
        except _Refuse as exc:
            return self._refuse(exc.status, str(exc))
        except httptools.HttpParserUpgrade:
            return self._refuse(400, "upgrades are not served here")
        except Exception as exc:  # httptools' parse errors, and a callback's _Refuse wrapped by it
            cause = exc.__context__ if isinstance(exc.__context__, _Refuse) else None
            return self._refuse(cause.status if cause else 400, str(cause) if cause else "malformed HTTP request")
        if self.queue and (self.task is None or self.task.done()) and not self.closed:
            self.task = _start(self.loop, self._serve())

    def pause_writing(self) -> None:
        self._drain = self.loop.create_future()
        if self.current is not None and self.current.on_pause is not None:
            self.current.on_pause(True)

    def resume_writing(self) -> None:
        if self._drain and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None
        if self.current is not None and self.current.on_pause is not None:
            self.current.on_pause(False)

    # ---- deadlines, checked by the server's one sweep (no timer per connection or request) -----------------
    def check(self, now: float) -> None:
        kind, lim = self.deadline_kind, self.limits
        limit = {"header": lim.header_timeout_s, "body": lim.body_timeout_s, "idle": lim.keepalive_s,
                 "closing": lim.keepalive_s or lim.body_timeout_s}.get(kind, 0)  # fmt: skip
        if not limit or now - self.mark < limit:
            return
        if kind == "closing":  # closed, but a client that does not read holds what is left to send: let go of it
            if self.transport is not None:
                _reset(self.transport)
        elif self.closed:
            return
        elif kind == "idle":
            self._close()
        else:
            self._refuse(408, f"the request's {kind} did not arrive in time")

    # ---- parser callbacks -------------------------------------------------------------------------------
    def _reset_request(self) -> None:
        self.url = b""
        self.head_bytes = 0
        self.fields: list[tuple[bytes, bytes]] = []
        self.headers: dict[bytes, bytes] = {}  # the fields by lower-case name, once the head is complete
        self.body: list[bytes] = []
        self.body_bytes = 0

    def on_message_begin(self) -> None:
        self._reset_request()
        if self.deadline_kind != "header":  # a pipelined request: its head's clock starts now
            self.deadline_kind, self.mark = "header", self.loop.time()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.head_bytes += len(url)
        if self.head_bytes > self.limits.max_header_bytes:
            raise _Refuse(431, f"request head over {self.limits.max_header_bytes} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        self.fields.append((name, value))
        if self.head_bytes > self.limits.max_header_bytes:
            raise _Refuse(431, f"request head over {self.limits.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        if len(self.fields) > self.limits.max_headers:
            raise _Refuse(431, f"more than {self.limits.max_headers} header fields")
        self.fields = [(n.lower(), v) for n, v in self.fields]
        names = [n for n, _ in self.fields]
        if (b"transfer-encoding" in names and b"content-length" in names) or names.count(b"content-length") > 1:
            raise _Refuse(400, "ambiguous request framing (Content-Length with Transfer-Encoding, or twice)")
        fields = self.headers = dict(self.fields)
        declared = fields.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.limits.max_body_bytes:
            raise _Refuse(413, f"request body over {self.limits.max_body_bytes} bytes")
        if fields.get(b"expect", b"").lower() == b"100-continue" and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits a second for this otherwise
        self.deadline_kind, self.mark = "body", self.loop.time()

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        if self.body_bytes > self.limits.max_body_bytes:
            raise _Refuse(413, f"request body over {self.limits.max_body_bytes} bytes")
        self.body.append(body)

    def on_message_complete(self) -> None:
        parsed = httptools.parse_url(self.url)
        method = self.parser.get_method().decode("ascii", errors="replace")
        keep = self.parser.should_keep_alive()
        request = Request(method, parsed.path.decode("latin-1"), parsed.query or b"", self.headers,
                          b"".join(self.body), keep, self.parser.get_http_version() == "1.0")  # fmt: skip
        request.outlet = Outlet(self, request.http10)
        self.queue.append(request)
        self.deadline_kind = "busy"
        if len(self.queue) >= self.limits.max_pipelined and self.transport:
            self.transport.pause_reading()

    # ---- answering --------------------------------------------------------------------------------------
    async def _serve(self) -> None:
        if not self.poll.enabled:
            return await self._answer_queue()
        self.poll.hold()
        try:
            await self._answer_queue()
        finally:
            self.poll.release()

    async def _answer_queue(self) -> None:
        while self.queue and not self.closed:
            request = self.queue.popleft()
            outlet = self.current = request.outlet or Outlet(self, request.http10)
            began = self.loop.time()
            try:
                response = await self.handler(request)
            except asyncio.CancelledError:
                return
            except Exception:  # a handler bug: a 500 for this request, the server goes on
                response = Response(500, b'{"error": {"message": "internal error", "type": "server_error"}}')
            finally:
                outlet.stop()
                self.current = None
            if isinstance(response, StreamResponse):
                keep = await self._stream(response, outlet)
            elif isinstance(response, Sent) or outlet.started:  # a stream begun can only end
                keep = outlet.ended and not outlet.http10
            else:
                keep = True
                self._write_whole(response, request.keep_alive)
            if self.limits.access_log:
                said = (
                    (outlet.status, outlet.headers)
                    if isinstance(response, Sent)
                    else (response.status, response.headers)
                )
                access_line(request.method, request.path, *said, self.loop.time() - began)
            if not (keep and request.keep_alive):
                self._close()
                return
            if self.transport and not self.closed:
                self.transport.resume_reading()
        if not self.closed:
            self.deadline_kind, self.mark = "idle", self.loop.time()

    def head(self, status: int, content_type: str, headers: list[tuple[str, str]], framing: str) -> bytes:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", f"content-type: {content_type}", framing]
        lines += [f"{k}: {v}" for k, v in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _write_whole(self, response: Response, keep: bool) -> None:
        framing = f"content-length: {len(response.body)}" + ("" if keep else "\r\nconnection: close")
        if self.transport and not self.closed:
            self.transport.write(self.head(response.status, response.content_type, response.headers, framing)
                                 + response.body)  # fmt: skip

    async def _stream(self, response: StreamResponse, outlet: Outlet) -> bool:
        """One write per piece (the head goes out with the first, unless it went early); False when the
        connection cannot be reused."""
        outlet.prepare(response.status, response.headers, response.content_type)
        chunks = response.chunks
        try:
            async for piece in chunks:
                if not outlet.send(piece):
                    return False
                if self._drain is not None:
                    await self._drain
            outlet.end()
            return outlet.ended and not outlet.http10
        finally:
            await _close_chunks(chunks)

    def _refuse(self, status: int, message: str) -> None:
        if self.transport and not self.closed and (self.task is None or self.task.done()):
            body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})
            self._write_whole(Response(status, body), keep=False)
        self._close()

    def _close(self) -> None:
        if self.transport and not self.closed:
            self.transport.close()  # what was written goes out first, if the client takes it (else: check)
            self.deadline_kind, self.mark = "closing", self.loop.time()
        self.closed = True


def _reset(transport: asyncio.Transport) -> None:
    """Abort with a TCP reset (SO_LINGER 0): what the kernel still holds for a client that does not read goes too,
    where a plain close would leave it to the kernel until the client reads or a timer gives up."""
    sock = transport.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _close_chunks(chunks: AsyncIterator[bytes]) -> None:
    """End the handler's generator (its cleanup runs: the upstream request is let go)."""
    closer = getattr(chunks, "aclose", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


class Listener:
    """The listening server and its open connections (closed with it), whose deadlines one timer sweeps."""

    def __init__(self, server: asyncio.Server, live: set[Connection], limits: ServerLimits) -> None:
        self.server, self.live = server, live
        self.loop = asyncio.get_running_loop()
        shortest = min(t for t in (limits.header_timeout_s, limits.body_timeout_s, limits.keepalive_s) if t > 0)
        self.every = min(1.0, max(0.05, shortest / 8))  # a deadline is kept to within an eighth of itself
        self._sweeper = self.loop.call_later(self.every, self._sweep)

    def _sweep(self) -> None:
        now = self.loop.time()
        for conn in list(self.live):
            conn.check(now)
        self._sweeper = self.loop.call_later(self.every, self._sweep)

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def serve_forever(self) -> None:
        try:
            await self.server.serve_forever()
        finally:
            self._sweeper.cancel()
            self.server.close()
            for conn in list(self.live):
                if conn.transport is not None:
                    conn.transport.abort()
            self.live.clear()


async def start_server(
    handler: Handler,
    host: str,
    port: int,
    limits: ServerLimits,
    *,
    reuse_port: bool = False,
    poll: BusyPoll | None = None,
) -> Listener:
    """Listen and serve ``handler``; ``reuse_port`` lets several worker processes share one port; ``poll`` is
    told of every request in and answered (:mod:`.poll`)."""
    loop = asyncio.get_running_loop()
    live: set[Connection] = set()
    poll = poll or BusyPoll(loop)
    server = await loop.create_server(lambda: Connection(handler, limits, live, poll), host, port,
                                      reuse_port=reuse_port or None, backlog=4096)  # fmt: skip
    return Listener(server, live, limits)
