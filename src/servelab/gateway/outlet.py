"""A handler's direct line to its client's connection: a streamed response written piece by piece from wherever
the bytes arrive (an upstream's read callback), with no task, generator or loop turn between the upstream's read
and the client's write; or started early with keep-alive comments while the handler still waits (a long prefill).

Chunked framing for HTTP/1.1; an HTTP/1.0 client gets the pieces as they are and the connection's close ends the
body. The head goes out with the first piece. While the client's socket buffer is full, ``on_pause(True)`` is
called (a relay stops reading its upstream) and ``on_pause(False)`` when it drained."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class Line(Protocol):
    """What an outlet needs of the server's connection."""

    closed: bool
    transport: asyncio.Transport | None
    loop: asyncio.AbstractEventLoop

    def head(self, status: int, content_type: str, headers: list[tuple[str, str]], framing: str) -> bytes: ...


class Outlet:
    def __init__(self, line: Line, http10: bool) -> None:
        self.line, self.http10 = line, http10
        self.started = False  # the head went out
        self.ended = False  # the body's end went out: the connection may serve another request
        self.on_pause: Callable[[bool], None] | None = None
        self._head: bytes | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self.status: int | None = None  # the head's, once prepared or sent (what the access log says)
        self.headers: list[tuple[str, str]] = []
        self._held: list[bytes] | None = None  # writes kept while an upstream read is being relayed

    @property
    def closed(self) -> bool:
        return self.line.closed or self.line.transport is None

    def _framing(self) -> str:
        return "connection: close" if self.http10 else "transfer-encoding: chunked"

    def _frame(self, piece: bytes) -> bytes:
        return piece if self.http10 else b"%x\r\n%b\r\n" % (len(piece), piece)

    def prepare(self, status: int, headers: list[tuple[str, str]], content_type: str = "text/event-stream") -> None:
        """The head to send with the first piece (nothing, when a head already went out)."""
        if not self.started:
            self._head = self.line.head(status, content_type, headers, self._framing())
            self.status, self.headers = status, headers

    def send(self, piece: bytes) -> bool:
        """Write one piece now (with the prepared head, the first time); False when the client is gone."""
        transport = self.line.transport
        if self.line.closed or transport is None:
            return False
        if self.ended:  # nothing after the body's end: it would be read as the start of the next answer
            return True
        if self._ticker is not None:
            self.stop()
        if piece:
            data = self._frame(piece)
            if self._head is not None:
                data, self._head, self.started = self._head + data, None, True
            self._write(transport, data)
        return True

    def end(self) -> None:
        """The body's end (the prepared head too, for an empty body)."""
        self.stop()
        transport = self.line.transport
        if self.ended or self.line.closed or transport is None:
            return
        self._write(transport, (self._head or b"") + (b"" if self.http10 else b"0\r\n\r\n"))
        self._head, self.started, self.ended = None, True, True
        self.flush()

    # ---- one write per upstream read -------------------------------------------------------------------
    def hold(self) -> None:
        """Keep what is sent until :meth:`flush`: every piece one upstream read brings (and the body's end, when
        it comes with them) leaves in one write, one system call."""
        if self._held is None:
            self._held = []

    def flush(self) -> None:
        held, self._held = self._held, None
        transport = self.line.transport
        if held and not self.line.closed and transport is not None:
            transport.write(held[0] if len(held) == 1 else b"".join(held))

    def _write(self, transport: asyncio.Transport, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        else:
            transport.write(data)

    # ---- keep-alive comments while the handler waits ----------------------------------------------------
    def start(
        self, status: int, headers: list[tuple[str, str]], content_type: str, piece: bytes, every_s: float
    ) -> None:
        """The head and ``piece`` now, then ``piece`` again every ``every_s`` until a real piece or :meth:`stop`."""
        transport = self.line.transport
        if self.started or self.line.closed or transport is None:
            return
        transport.write(self.line.head(status, content_type, headers, self._framing()) + self._frame(piece))
        self.started, self._head, self.status, self.headers = True, None, status, headers
        self._ticker = self.line.loop.call_later(every_s, self._tick, piece, every_s)

    def _tick(self, piece: bytes, every_s: float) -> None:
        transport = self.line.transport
        if self.line.closed or transport is None:
            return
        transport.write(self._frame(piece))
        self._ticker = self.line.loop.call_later(every_s, self._tick, piece, every_s)

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
