"""The gateway's own HTTP/1.1 server: an asyncio protocol over httptools' parser, doing as little as possible per
request and per chunk, with the limits a proxy in front of a realtime stack needs.

- Limits (``[server]``): the head within ``header_timeout_s``, at most ``max_header_bytes`` and ``max_headers``
  fields (431); the whole body within ``body_timeout_s`` of its head however it is paced, no pause over
  ``body_pause_s``, at most ``max_body_bytes`` (413); idle keep-alive connections closed after ``keepalive_s``;
  connections held up to a cap (:mod:`.slots`: idle ones give way); a closed connection whose client does not
  take what is left is dropped after ``keepalive_s`` more. The listener's one timer sweeps every deadline
  (:mod:`.listener`): a request costs no timer, a read one clock store.
- The head is shown to the gate (the key check) before any of the body is read: a refusal is answered without
  reading it. Ambiguous framing (Content-Length with Transfer-Encoding, or twice) or an upgrade is a 400.
- Requests are answered in order, one at a time per connection: a refusal too, after the answers before it,
  then a half-close, what the client still sends dropped for at most ``header_timeout_s`` (so it reads the
  answer, not a reset); ``100 Continue`` only once every answer before its request is over.
- The handler gets the whole body; a client that goes away cancels its handler's task (its upstream request is
  let go). Streams go out chunked (as they are to an HTTP/1.0 client), one write per piece, through the
  request's :class:`Outlet`, which a handler may write from any callback and then answer :class:`Sent`.
- Every answer is told to the ``observe`` hook once it is over (a client that left mid-answer included).
  Nothing of the request is reflected in a response that the handler did not write.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections import deque
from collections.abc import AsyncIterator

import httptools
import orjson

from servelab.gateway.access import access_line
from servelab.gateway.messages import (
    REASONS,
    Handler,
    Headers,
    Request,
    Response,
    Sent,
    ServerHooks,
    ServerLimits,
    StreamResponse,
    start_task,
)
from servelab.gateway.outlet import Outlet
from servelab.gateway.poll import BusyPoll
from servelab.gateway.slots import Slots

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
NO_HOOKS = ServerHooks()


class _Refuse(Exception):
    def __init__(self, status: int, message: str, answer: Response | None = None) -> None:
        super().__init__(message)
        self.status, self.answer = status, answer


class Connection(asyncio.Protocol):
    def __init__(
        self,
        handler: Handler,
        limits: ServerLimits,
        slots: Slots[Connection],
        poll: BusyPoll,
        hooks: ServerHooks = NO_HOOKS,
    ) -> None:
        self.handler, self.limits, self.slots, self.poll, self.hooks = handler, limits, slots, poll, hooks
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[Request | Response] = deque()  # a Response here is a refusal: the connection's last word
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.draining = False  # refused: what the client still sends is read and dropped
        self.in_message = False  # a request is being parsed (its head or body still arriving)
        self.continue_owed = False  # its client waits for 100 Continue, and an answer before it is not over
        self.current: Outlet | None = None  # the outlet of the request being answered
        self._drain: asyncio.Future[None] | None = None
        self._reset_request()
        self.deadline_kind = "header"  # or body, continue (its 100 owed), busy, idle, closing, drain (refused)
        self.mark = self.body_began = self.loop.time()

    # ---- connection -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes
        if not self.slots.admit(self):
            self.closed = True
            transport.abort()  # type: ignore[attr-defined]

    def evict(self) -> None:
        """Give way to a new connection (this one holds no request)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.slots.remove(self)
        if self.task and not self.task.done():
            self.task.cancel()  # the client left: the handler lets go of its upstream
        if self._drain and not self._drain.done():
            self._drain.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.draining:
            return  # refused: dropped unread
        if self.deadline_kind == "body":
            self.mark = self.loop.time()
        elif self.deadline_kind == "idle":
            self.deadline_kind, self.mark = "header", self.loop.time()
        try:
            self.parser.feed_data(data)
        except _Refuse as exc:
            return self._refuse(exc.status, str(exc), exc.answer)
        except httptools.HttpParserUpgrade:
            return self._refuse(400, "upgrades are not served here")
        except Exception as exc:  # httptools' parse errors, and a callback's _Refuse wrapped by it
            cause = exc.__context__ if isinstance(exc.__context__, _Refuse) else None
            if cause is not None:
                return self._refuse(cause.status, str(cause), cause.answer)
            return self._refuse(400, "malformed HTTP request")
        if self.queue and (self.task is None or self.task.done()) and not self.closed:
            self.task = start_task(self.loop, self._serve())

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

    # ---- deadlines, checked by the listener's one sweep (no timer per connection or request) ---------------
    def check(self, now: float) -> None:
        kind, lim = self.deadline_kind, self.limits
        if kind == "body":
            return self._check_body(now)
        limit = {"header": lim.header_timeout_s, "idle": lim.keepalive_s, "drain": lim.header_timeout_s,
                 "closing": lim.keepalive_s or lim.body_timeout_s}.get(kind, 0)  # fmt: skip
        if not limit or now - self.mark < limit:
            return
        if kind in ("closing", "drain"):  # a client that does not read (or will not stop sending): let go of it
            self.closed = True
            if self.transport is not None:
                _reset(self.transport)
        elif self.closed:
            return
        elif kind == "idle":
            self._close()
        else:
            self._refuse(408, "the request's head did not arrive in time")

    def _check_body(self, now: float) -> None:
        lim = self.limits
        if now - self.body_began >= lim.body_timeout_s:
            self._refuse(408, f"the request's body did not arrive within {lim.body_timeout_s:g} s")
        elif now - self.mark >= lim.body_pause_s:
            self._refuse(408, f"the request's body paused for more than {lim.body_pause_s:g} s")

    # ---- parser callbacks -------------------------------------------------------------------------------
    def _reset_request(self) -> None:
        self.url = b""
        self.head_bytes = 0
        self.fields: list[tuple[bytes, bytes]] = []
        self.headers: dict[bytes, bytes] = {}  # the fields by lower-case name, once the head is complete
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.continue_owed = False

    def on_message_begin(self) -> None:
        self._reset_request()
        self.in_message = True
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
        self.path = httptools.parse_url(self.url)
        self.method = self.parser.get_method().decode("ascii", errors="replace")
        gate = self.hooks.gate
        if gate is not None and (denied := gate(self.method, self.path.path.decode("latin-1"), fields)) is not None:
            raise _Refuse(denied.status, "", denied)  # before any of the body is read
        self.slots.busy(self)
        self.deadline_kind = "body"
        self.mark = self.body_began = self.loop.time()
        if b"expect" in fields and self._expects_continue():
            self._continue()

    def _expects_continue(self) -> bool:
        """``Expect: 100-continue`` (in any of the request's Expect fields), from an HTTP/1.1 client."""
        if self.parser.get_http_version() == "1.0":
            return False
        return any(n == b"expect" and v.strip().lower() == b"100-continue" for n, v in self.fields)

    def _continue(self) -> None:
        """100 Continue now if this request's turn has come (no answer before it still going out), else once it
        has: the 100 of a pipelined request never lands inside the answer before it."""
        if self.queue or (self.task is not None and not self.task.done()):
            self.continue_owed, self.deadline_kind = True, "continue"  # its body's clock starts with the 100
        elif self.transport is not None:
            self.transport.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self.continue_owed:  # the client sent its body without waiting: no 100 for it any more
            self.continue_owed = False
            self.deadline_kind, self.mark = "body", self.loop.time()
            self.body_began = self.mark
        self.body_bytes += len(body)
        if self.body_bytes > self.limits.max_body_bytes:
            raise _Refuse(413, f"request body over {self.limits.max_body_bytes} bytes")
        self.body.append(body)

    def on_message_complete(self) -> None:
        parsed, keep = self.path, self.parser.should_keep_alive()
        request = Request(self.method, parsed.path.decode("latin-1"), parsed.query or b"", self.headers,
                          b"".join(self.body), keep, self.parser.get_http_version() == "1.0")  # fmt: skip
        request.outlet, request.gated = Outlet(self, request.http10), self.hooks.gate is not None
        self.queue.append(request)
        self.in_message, self.continue_owed, self.deadline_kind = False, False, "busy"
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
            if isinstance(request, Response):
                return self._last_word(request)
            if not await self._answer(request):
                self._close()
                return
            if self.transport and not self.closed:
                self.transport.resume_reading()
        if not self.closed:
            self._between_answers()

    async def _answer(self, request: Request) -> bool:
        """One request answered; whether the connection may serve another."""
        outlet = self.current = request.outlet or Outlet(self, request.http10)
        began = self.loop.time()
        try:
            response = await self.handler(request)
        except asyncio.CancelledError:
            self._said(request, outlet.status if outlet.started and outlet.status else 499, outlet.headers, began)
            raise
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
        if outlet.status is not None:  # a head went out through the outlet (a stream, keep-alive comments)
            self._said(request, outlet.status, outlet.headers, began)
        elif not isinstance(response, Sent):
            self._said(request, response.status, response.headers, began)
        return keep and request.keep_alive

    def _said(self, request: Request, status: int, headers: Headers, began: float) -> None:
        if self.hooks.observe is not None:
            self.hooks.observe(status, headers)
        if self.limits.access_log:
            access_line(request.method, request.path, status, headers, self.loop.time() - began)

    def _between_answers(self) -> None:
        """Every queued request is answered: one waiting for its 100 Continue gets it now; with no request begun
        the connection waits idle; idle, or with only a head arriving, it may give way to a new one."""
        if self.continue_owed:
            self.continue_owed, self.deadline_kind = False, "body"
            if self.transport is not None:
                self.transport.write(CONTINUE)
            self.mark = self.body_began = self.loop.time()
            return
        if not self.in_message:
            self.deadline_kind, self.mark = "idle", self.loop.time()
        if self.deadline_kind in ("idle", "header"):
            self.slots.wait(self)

    def head(self, status: int, content_type: str, headers: Headers, framing: str) -> bytes:
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

    # ---- refusing and closing ---------------------------------------------------------------------------
    def _refuse(self, status: int, message: str, answer: Response | None = None) -> None:
        """Refuse the request being read: answered in its turn (after the answers before it), then the
        connection ends. Nothing more of what the client sends is parsed."""
        if self.closed or self.draining:
            return
        self.draining = True
        if answer is None:
            answer = Response(status, orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}}))
        if not self.queue and (self.task is None or self.task.done()):
            return self._last_word(answer)
        self.queue.append(answer)
        if self.task is None or self.task.done():
            self.task = start_task(self.loop, self._serve())

    def _last_word(self, answer: Response) -> None:
        """The refusal, then a half-close: the client reads it and closes, while what it still sends is dropped
        (a close with unread input would reset the connection, and the answer with it)."""
        self.draining = True
        self._write_whole(answer, keep=False)
        if self.transport is None or self.closed:
            return
        with contextlib.suppress(Exception):  # a transport that cannot half-close is closed instead
            self.transport.write_eof()
            self.transport.resume_reading()
            self.deadline_kind, self.mark = "drain", self.loop.time()
            self.slots.wait(self)
            return
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
