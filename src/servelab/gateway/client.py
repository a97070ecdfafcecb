"""The gateway's upstream client: HTTP/1.1 over asyncio protocols and httptools' response parser, keep-alive
connections in a last-in-first-out pool per upstream (taking or giving one back is O(1), whatever the pool
holds), body pieces handed on as each network read brings them.

A request is never sent twice: once any of it is written, a failure raises :class:`UpstreamError` with ``sent``
set and nothing is written again (the upstream may have read it and acted on it: a paid call charged twice, a
generation run twice); only a connection found closed *before* the write is passed over, for the next pooled one
or a new one. So that a pooled connection is rarely closed under a request, one idle longer than ``max_idle_s``
(below the usual servers' keep-alive timeouts) is not reused. A connection that brings bytes after an answer is
complete (in the same read, or while pooled) is closed, never reused: they would be taken for the next
request's answer. Any failure before the response head raises :class:`UpstreamError`; after it,
:meth:`UpstreamResponse.read` raises it. Closing a response before its end closes the connection, which an
OpenAI-compatible engine takes as an abort. Every request asks for ``accept-encoding: identity``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Protocol
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 1 << 20  # buffered body bytes before the upstream socket is paused
MAX_HEAD_BYTES = 64 * 1024  # an upstream's response head (status line and fields) may be at most this
MAX_HEAD_FIELDS = 256


class _HeadTooLarge(Exception):
    pass


class UpstreamError(Exception):
    """The upstream could not be reached, or broke off; ``before_head`` when no response head had arrived;
    ``sent`` when some of the request had been written (the upstream may have taken it: never sent again)."""

    def __init__(self, message: str, before_head: bool = True, sent: bool = True) -> None:
        super().__init__(message)
        self.before_head, self.sent = before_head, sent


class Sink(Protocol):
    """Takes a response's body pieces in the connection's read callback (see :meth:`UpstreamResponse.attach`)."""

    def piece(self, data: bytes) -> None: ...

    def ended(self) -> None: ...

    def failed(self, error: UpstreamError) -> None: ...

    def hold(self) -> None: ...  # a read begins: what it brings may be written out at once, at its end

    def flush(self) -> None: ...


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0  # when it went into the pool
        self.idle = False  # in the pool, no request on it: any byte arriving now is not an answer to anything
        self.aborted = False  # closed by this side (so a close does not end a body framed by the close)
        self._reset()

    def _reset(self) -> None:
        self.head: asyncio.Future[None] = self.loop.create_future()
        self.fields: list[tuple[bytes, bytes]] = []
        self.field_bytes = 0  # the head's field names and values so far
        self.interim = False  # the message being read is an interim (1xx) answer
        self.until_close = False  # its body has no length and no chunks: the connection's close ends it
        self.head_bytes = 0  # bytes read before the head was complete
        self.pieces: deque[bytes] = deque()
        self.buffered = 0
        self.waiter: asyncio.Future[None] | None = None
        self.done = False
        self.keep = False
        self.error: UpstreamError | None = None
        self.paused = False
        self.sink: Sink | None = None
        self.stray = False  # a message began after the answer: nothing of it is the answer's

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.done and self.until_close and exc is None and self.head.done() and not self.aborted:
            self.on_message_complete()  # a body framed by the close: it ended, nothing broke
            self.keep = False
        elif not self.done:
            before = not self.head.done()
            self.error = UpstreamError(f"upstream closed the connection{f': {exc}' if exc else ''}", before)
            self._wake()
            if self.sink is not None:
                self.sink.failed(self.error)

    def data_received(self, data: bytes) -> None:
        if self.idle:  # unasked bytes (a stray answer, an idle server's 408): parsed, they would answer the next
            return self.abort()  # request sent on this connection, so it is dropped from the pool instead
        if not self.head.done():
            self.head_bytes += len(data)
        sink = self.sink
        if sink is None:
            return self._feed(data)
        sink.hold()
        try:
            self._feed(data)
        finally:
            sink.flush()

    def _feed(self, data: bytes) -> None:
        try:
            if self.head_bytes > MAX_HEAD_BYTES + HIGH_WATER:  # a head that never ends, past any body bytes
                raise _HeadTooLarge
            self.parser.feed_data(data)
        except (httptools.HttpParserError, _HeadTooLarge) as exc:
            big = isinstance(exc, _HeadTooLarge) or isinstance(exc.__context__, _HeadTooLarge)
            why = f"response head over {MAX_HEAD_BYTES} bytes or {MAX_HEAD_FIELDS} fields" if big else str(exc)
            self.error = UpstreamError(f"malformed response from upstream: {why}", not self.head.done())
            self._wake()
            self.abort()

    # parser callbacks
    def on_message_begin(self) -> None:
        if self.done:  # more bytes after the answer, and no request asked for them: dropped, and the connection
            self.stray, self.keep = True, False  # is not reused

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.stray:
            return
        self.fields.append((name.lower(), value))
        self.field_bytes += len(name) + len(value)
        if self.field_bytes > MAX_HEAD_BYTES or len(self.fields) > MAX_HEAD_FIELDS:
            raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        if self.stray:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue, 103 Early Hints): skipped
            self.interim, self.fields, self.field_bytes = True, [], 0
            return
        names = {name for name, _ in self.fields}
        chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in self.fields)
        self.until_close = b"content-length" not in names and not chunked and status not in (204, 304)
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.stray:
            return
        if self.sink is not None:
            self.sink.piece(body)
            return
        self.pieces.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and self.transport and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        if self.waiter and not self.waiter.done():
            self.waiter.set_result(None)

    def on_message_complete(self) -> None:
        if self.stray:
            return
        if self.interim:  # the answer itself follows on the same connection
            self.interim = False
            return
        self.done, self.keep = True, self.parser.should_keep_alive()
        self._wake()
        if self.sink is not None:
            self.sink.ended()

    def _wake(self) -> None:
        if not self.head.done():
            if self.error:
                self.head.set_exception(self.error)
            else:
                self.head.set_result(None)
        if self.waiter and not self.waiter.done():
            self.waiter.set_result(None)

    def abort(self) -> None:
        self.closed = self.aborted = True
        if self.transport:
            self.transport.close()


class UpstreamResponse:
    def __init__(self, conn: _Conn, client: HttpClient) -> None:
        self._conn, self._client = conn, client
        self.status = conn.parser.get_status_code()
        self.headers = dict(conn.fields)
        self._released = False

    def header(self, name: bytes) -> str:
        return self.headers.get(name, b"").decode("latin-1")

    async def read(self) -> bytes:
        """The next body piece as it arrived; b"" at the end."""
        conn = self._conn
        while True:
            if conn.pieces:
                piece = conn.pieces.popleft()
                conn.buffered -= len(piece)
                if conn.paused and conn.buffered < HIGH_WATER // 2 and conn.transport:
                    conn.paused = False
                    conn.transport.resume_reading()
                return piece
            if conn.done:
                self.release()
                return b""
            if conn.error:
                raise UpstreamError(str(conn.error), before_head=False)
            conn.waiter = conn.loop.create_future()
            await conn.waiter
            conn.waiter = None

    def attach(self, sink: Sink) -> None:
        """From now on the body goes to ``sink`` as each read brings it, in the read callback itself (what was
        buffered first); :meth:`read` is not used after this."""
        conn = self._conn
        conn.sink = sink
        while conn.pieces:
            sink.piece(conn.pieces.popleft())
        conn.buffered = 0
        if conn.paused:
            conn.paused = False
            self.pause(False)
        if conn.done:
            sink.ended()
        elif conn.error is not None:
            sink.failed(conn.error)

    def pause(self, paused: bool) -> None:
        """Stop (or go on) reading the upstream: the client is not taking the bytes."""
        transport = self._conn.transport
        if transport is not None and not self._conn.closed:
            transport.pause_reading() if paused else transport.resume_reading()

    async def read_all(self, limit: int = 64 * 2**20, idle_s: float | None = None) -> bytes:
        """The rest of the body, at most ``limit`` bytes; with ``idle_s``, TimeoutError when no byte came for that
        long (an upstream that stalls mid-body with its connection open)."""
        out, size = [], 0
        while piece := await (self._read_within(idle_s) if idle_s else self.read()):
            size += len(piece)
            if size > limit:
                self.close()
                raise UpstreamError(f"upstream body over {limit} bytes", before_head=False)
            out.append(piece)
        return b"".join(out)

    async def _read_within(self, seconds: float) -> bytes:
        async with asyncio.timeout(seconds):
            return await self.read()

    def release(self) -> None:
        """Give the connection back when the response is complete, else close it (an abort upstream)."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        if conn.done and conn.keep and not conn.closed:
            self._client._put(conn)
        else:
            conn.abort()

    close = release


class HttpClient:
    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = 5.0,
        headers: dict[str, str] | None = None,
        max_idle: int = 512,
        max_idle_s: float = 4.0,
    ) -> None:
        """``max_idle`` pooled connections at most; one idle longer than ``max_idle_s`` is closed, not reused
        (uvicorn closes idle ones after 5 s, and a request written as one closes cannot be sent again)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base = parts.path.rstrip("/")
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        self.connect_timeout, self.max_idle, self.max_idle_s = connect_timeout, max_idle, max_idle_s
        authority = self.host if parts.port is None else f"{self.host}:{self.port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._fixed = f"host: {authority}\r\naccept-encoding: identity\r\n{extra}".encode("latin-1")
        self._idle: deque[_Conn] = deque()

    async def request(self, method: str, path: str, body: bytes | None = None, root: bool = False) -> UpstreamResponse:
        """Send and wait for the response head (the caller bounds the wait). ``path`` is under the upstream's
        base path (its /v1), or beside it with ``root`` (an engine's /health and /tokenize). Written once: any
        failure after the write raises (``sent``), never a second write (see the module's docstring)."""
        data = self.request_bytes(method, path, body, root)
        conn = self._pooled() or await self._connect()
        if conn.closed or conn.transport is None or conn.transport.is_closing():
            raise UpstreamError(f"{self.host}:{self.port} closed the connection before the request", sent=False)
        conn._reset()
        conn.transport.write(data)
        try:
            await conn.head
        except BaseException:
            conn.abort()
            raise
        return UpstreamResponse(conn, self)

    def request_bytes(self, method: str, path: str, body: bytes | None = None, root: bool = False) -> bytes:
        """What :meth:`request` sends (see there for ``path`` and ``root``)."""
        return self._encode(method, (self.base.removesuffix("/v1") if root else self.base) + path, body)

    def _encode(self, method: str, target: str, body: bytes | None) -> bytes:
        head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + self._fixed
        if body is None:
            return head + b"\r\n"
        return head + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)

    def _pooled(self) -> _Conn | None:
        """The most recently used idle connection still open and idle at most ``max_idle_s`` (None: a new one is
        needed). Older ones are closed: the most recent is the least likely to be closed by the server."""
        oldest = asyncio.get_running_loop().time() - self.max_idle_s
        while self._idle:
            conn = self._idle.pop()
            if conn.idle_since < oldest:
                conn.abort()
                self._close_idle()  # those below it are older still
                return None
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                conn.idle = False
                return conn
        return None

    def _close_idle(self) -> None:
        while self._idle:
            self._idle.pop().abort()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await loop.create_connection(
                    _Conn, self.host, self.port, ssl=self.ssl, server_hostname=self.host if self.ssl else None
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            why = f"cannot connect to {self.host}:{self.port}: {type(exc).__name__}: {exc}"
            raise UpstreamError(why, sent=False) from exc
        return protocol

    def _put(self, conn: _Conn) -> None:
        if len(self._idle) >= self.max_idle:
            conn.abort()
            return
        conn.idle, conn.sink = True, None  # the finished answer's sink gets nothing more from this connection
        conn.idle_since = conn.loop.time()
        self._idle.append(conn)

    async def get(self, path: str, timeout: float, root: bool = False) -> tuple[int, bytes]:
        return await self._whole("GET", path, None, timeout, root)

    async def post(self, path: str, body: bytes, timeout: float, root: bool = False) -> tuple[int, bytes]:
        return await self._whole("POST", path, body, timeout, root)

    async def _whole(self, method: str, path: str, body: bytes | None, timeout: float, root: bool) -> tuple[int, bytes]:
        response: UpstreamResponse | None = None
        try:
            async with asyncio.timeout(timeout):
                response = await self.request(method, path, body, root)
                return response.status, await response.read_all()
        finally:
            if response is not None:
                response.close()

    async def aclose(self) -> None:
        self._close_idle()
