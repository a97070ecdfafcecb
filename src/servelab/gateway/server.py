"""The gateway's own HTTP/1.1 server: an asyncio protocol over httptools' parser, doing as little as possible per
request and per chunk, with the limits a proxy in front of a realtime stack needs.

- Limits, all in the config (``[server]``): the head must arrive within ``header_timeout_s``, be at most
  ``max_header_bytes`` with at most ``max_headers`` fields (431 otherwise); the body may not pause longer
  than ``body_timeout_s`` between reads nor exceed ``max_body_bytes`` (413); an idle keep-alive connection
  is closed after ``keepalive_s``; at most ``max_connections`` are open at once (more are closed at once).
  One timer per connection, re-armed lazily: a read costs one clock store.
- A request with both Content-Length and Transfer-Encoding, several Content-Length values, or an upgrade is
  refused (400) and the connection closed. Requests are answered in order, one at a time per connection.
- The handler gets the whole body; a client that goes away cancels its handler's task, so whatever it was
  waiting on (an upstream request) is let go at once. Streams go out chunked, one write per piece, and the
  handler waits only while the client's socket buffer is full.
- Nothing of the request is reflected in a response that the handler did not write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httptools
import orjson

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


@dataclass
class Request:
    method: str
    path: str
    query: bytes
    headers: dict[bytes, bytes]  # lower-case names; a repeated field keeps its last value
    body: bytes = b""
    keep_alive: bool = True
    http10: bool = False  # an HTTP/1.0 client: no chunked encoding, the connection closes after the answer
    early: EarlyStart | None = None  # starts a stream before the handler returns (keep-alive comments)

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


Handler = Callable[[Request], Awaitable[Response | StreamResponse]]


def _frame(piece: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(piece), piece)


class EarlyStart:
    """Lets a handler that is still waiting (a long prefill upstream) start its streamed response: the head and a
    first piece go out now, then the same piece every ``every_s`` until :meth:`stop`; the StreamResponse the
    handler returns later goes on after them."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.started = conn, False
        self._ticker: asyncio.TimerHandle | None = None

    def start(
        self, status: int, headers: list[tuple[str, str]], content_type: str, piece: bytes, every_s: float
    ) -> None:
        conn = self.conn
        if conn.closed or conn.transport is None or self.started:
            return
        conn.transport.write(conn._head(status, content_type, headers, "transfer-encoding: chunked") + _frame(piece))
        self.started = True
        self._ticker = conn.loop.call_later(every_s, self._tick, piece, every_s)

    def _tick(self, piece: bytes, every_s: float) -> None:
        conn = self.conn
        if conn.closed or conn.transport is None:
            return
        conn.transport.write(_frame(piece))
        self._ticker = conn.loop.call_later(every_s, self._tick, piece, every_s)

    def stop(self) -> None:
        if self._ticker:
            self._ticker.cancel()
            self._ticker = None


class _Refuse(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Connection(asyncio.Protocol):
    def __init__(self, handler: Handler, limits: ServerLimits, live: set[Connection]) -> None:
        self.handler, self.limits, self.live = handler, limits, live
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self._drain: asyncio.Future[None] | None = None
        self._reset_request()
        self.deadline_kind = "header"  # header: since the request began; body: since the last read; idle
        self.mark = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None

    # ---- connection -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes
        self.live.add(self)
        if len(self.live) > self.limits.max_connections:
            self.transport.abort()  # type: ignore[union-attr]
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.live.discard(self)
        if self.timer:
            self.timer.cancel()
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
            self._refuse(exc.status, str(exc))
        except httptools.HttpParserUpgrade:
            self._refuse(400, "upgrades are not served here")
        except Exception as exc:  # httptools' parse errors, and a callback's _Refuse wrapped by it
            cause = exc.__context__ if isinstance(exc.__context__, _Refuse) else None
            self._refuse(cause.status if cause else 400, str(cause) if cause else "malformed HTTP request")

    def pause_writing(self) -> None:
        self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._drain and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # ---- one timer, re-armed lazily ---------------------------------------------------------------------
    def _limit(self) -> float:
        lim = self.limits
        return {"header": lim.header_timeout_s, "body": lim.body_timeout_s, "idle": lim.keepalive_s}.get(
            self.deadline_kind, 0.0
        )

    def _arm(self) -> None:
        if self.timer:
            self.timer.cancel()
        limit = self._limit()
        self.timer = self.loop.call_at(self.mark + limit, self._check) if limit else None

    def _check(self) -> None:
        self.timer = None
        limit = self._limit()
        if not limit or self.closed:
            return
        if self.loop.time() - self.mark < limit:
            self.timer = self.loop.call_at(self.mark + limit, self._check)
            return
        if self.deadline_kind == "idle":
            self._close()
        else:
            self._refuse(408, f"the request's {self.deadline_kind} did not arrive in time")

    # ---- parser callbacks -------------------------------------------------------------------------------
    def _reset_request(self) -> None:
        self.url = b""
        self.head_bytes = 0
        self.fields: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_bytes = 0

    def on_message_begin(self) -> None:
        self._reset_request()
        if self.deadline_kind != "header":  # a pipelined request: its head's clock starts now
            self.deadline_kind, self.mark = "header", self.loop.time()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        self.fields.append((name.lower(), value))
        if len(self.fields) > self.limits.max_headers:
            raise _Refuse(431, f"more than {self.limits.max_headers} header fields")

    def _count(self, n: int) -> None:
        self.head_bytes += n
        if self.head_bytes > self.limits.max_header_bytes:
            raise _Refuse(431, f"request head over {self.limits.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        names = [n for n, _ in self.fields]
        if (b"transfer-encoding" in names and b"content-length" in names) or names.count(b"content-length") > 1:
            raise _Refuse(400, "ambiguous request framing (Content-Length with Transfer-Encoding, or twice)")
        fields = dict(self.fields)
        declared = fields.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.limits.max_body_bytes:
            raise _Refuse(413, f"request body over {self.limits.max_body_bytes} bytes")
        if fields.get(b"expect", b"").lower() == b"100-continue" and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits a second for this otherwise
        self.deadline_kind, self.mark = "body", self.loop.time()
        self._arm()

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        if self.body_bytes > self.limits.max_body_bytes:
            raise _Refuse(413, f"request body over {self.limits.max_body_bytes} bytes")
        self.body.append(body)

    def on_message_complete(self) -> None:
        parsed = httptools.parse_url(self.url)
        method = self.parser.get_method().decode("ascii", errors="replace")
        keep = self.parser.should_keep_alive()
        request = Request(method, parsed.path.decode("latin-1"), parsed.query or b"", dict(self.fields),
                          b"".join(self.body), keep, self.parser.get_http_version() == "1.0")  # fmt: skip
        request.early = EarlyStart(self)
        self.queue.append(request)
        self.deadline_kind = "busy"
        if self.timer:
            self.timer.cancel()
            self.timer = None
        if len(self.queue) >= self.limits.max_pipelined and self.transport:
            self.transport.pause_reading()
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._serve())

    # ---- answering --------------------------------------------------------------------------------------
    async def _serve(self) -> None:
        while self.queue and not self.closed:
            request = self.queue.popleft()
            keep = request.keep_alive
            try:
                response = await self.handler(request)
            except asyncio.CancelledError:
                return
            except Exception:  # a handler bug: a 500 for this request, the server goes on
                response = Response(500, b'{"error": {"message": "internal error", "type": "server_error"}}')
            early = request.early
            if early is not None:
                early.stop()
            if isinstance(response, StreamResponse) and request.http10:
                await self._stream_plain(response)
                keep = False
            elif isinstance(response, StreamResponse):
                keep = await self._stream(response, head_sent=bool(early and early.started)) and keep
            elif early is not None and early.started:  # a stream already begun can only end: close it
                keep = False
            else:
                self._write_whole(response, keep)
            if not keep:
                self._close()
                return
            if self.transport and not self.closed:
                self.transport.resume_reading()
        if not self.closed:
            self.deadline_kind, self.mark = "idle", self.loop.time()
            self._arm()

    def _head(self, status: int, content_type: str, headers: list[tuple[str, str]], framing: str) -> bytes:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", f"content-type: {content_type}", framing]
        lines += [f"{k}: {v}" for k, v in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _write_whole(self, response: Response, keep: bool) -> None:
        framing = f"content-length: {len(response.body)}" + ("" if keep else "\r\nconnection: close")
        if self.transport and not self.closed:
            self.transport.write(self._head(response.status, response.content_type, response.headers, framing)
                                 + response.body)  # fmt: skip

    async def _stream(self, response: StreamResponse, head_sent: bool = False) -> bool:
        """Chunked, one write per piece (the head goes out with the first, unless it went early); False when
        the connection cannot be reused."""
        assert self.transport is not None
        head: bytes | None = (
            None
            if head_sent
            else self._head(response.status, response.content_type, response.headers, "transfer-encoding: chunked")
        )
        chunks = response.chunks
        try:
            async for piece in chunks:
                if self.closed:
                    return False
                if piece:
                    framed = _frame(piece)
                    self.transport.write(head + framed if head else framed)
                    head = None
                    if self._drain is not None:
                        await self._drain
            if not self.closed:
                self.transport.write((head or b"") + b"0\r\n\r\n")
            return not self.closed
        finally:
            await _close_chunks(chunks)

    async def _stream_plain(self, response: StreamResponse) -> None:
        """For an HTTP/1.0 client: the pieces as they are, the end of the body is the connection's close."""
        assert self.transport is not None
        self.transport.write(self._head(response.status, response.content_type, response.headers, "connection: close"))
        try:
            async for piece in response.chunks:
                if self.closed:
                    return
                self.transport.write(piece)
                if self._drain is not None:
                    await self._drain
        finally:
            await _close_chunks(response.chunks)

    def _refuse(self, status: int, message: str) -> None:
        if self.transport and not self.closed and (self.task is None or self.task.done()):
            body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})
            self._write_whole(Response(status, body), keep=False)
        self._close()

    def _close(self) -> None:
        if self.transport and not self.closed:
            self.transport.close()
        self.closed = True


async def _close_chunks(chunks: AsyncIterator[bytes]) -> None:
    """End the handler's generator (its cleanup runs: the upstream request is let go)."""
    closer = getattr(chunks, "aclose", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


class Listener:
    """The listening server and its open connections (closed with it)."""

    def __init__(self, server: asyncio.Server, live: set[Connection]) -> None:
        self.server, self.live = server, live

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def serve_forever(self) -> None:
        try:
            await self.server.serve_forever()
        finally:
            self.server.close()
            for conn in list(self.live):
                if conn.transport is not None:
                    conn.transport.abort()
            self.live.clear()


async def start_server(
    handler: Handler, host: str, port: int, limits: ServerLimits, *, reuse_port: bool = False
) -> Listener:
    """Listen and serve ``handler``; ``reuse_port`` lets several worker processes share one port."""
    loop = asyncio.get_running_loop()
    live: set[Connection] = set()
    server = await loop.create_server(lambda: Connection(handler, limits, live), host, port,
                                      reuse_port=reuse_port or None, backlog=4096)  # fmt: skip
    return Listener(server, live)
