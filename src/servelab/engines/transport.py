"""A minimal HTTP/1.1 POST whose response bytes are stamped as they reach the socket.

Load generators built on a general client stamp a chunk when their task gets round to it;
under 64 concurrent streams that is milliseconds late. Here ``data_received`` takes
``perf_counter_ns()`` first and only stores the bytes; framing (h11) and SSE parsing run
afterwards, on the stored copy. One connection per request (``Connection: close``).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h11

from servelab.core.errors import UsageError
from servelab.engines.lateness import READ_LATENESS


@dataclass(slots=True)
class Segment:
    arrived_ns: int
    data: bytes


class ConnectFailed(Exception):
    """The TCP/TLS connection could not be opened."""


class IdleTimeout(Exception):
    """No byte arrived within the read timeout."""


class PeerClosed(Exception):
    """The server closed the connection before the response ended."""


class _Receiver:
    """Collects stamped segments; ``take()`` hands them to the reading task in batches."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _mark_closed(self) -> None:
        self.closed = True
        self._wake()

    async def take(self) -> list[Segment]:
        """All segments received since the last call; waits for at least one, or for the close."""
        while not self.segments and not self.closed:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None
        taken, self.segments = self.segments, []
        return taken

    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _StampingProtocol(_Receiver, asyncio.Protocol):
    """For TLS: stamps in ``data_received``, before anything else happens to the bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.segments.append(Segment(time.perf_counter_ns(), data))
        self._wake()

    def eof_received(self) -> bool:
        self._mark_closed()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._mark_closed()

    async def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _KernelStampedSocket(_Receiver):
    """For plain TCP: the kernel's receive time of the bytes (SO_TIMESTAMPNS), read with recvmsg.

    The kernel stamps each packet as it lands, so a busy event loop reading it late does not move
    the stamp. Kernel stamps are CLOCK_REALTIME; they are moved onto perf_counter_ns's clock with
    the offset read at the same moment. Where the kernel gives no stamp, the read time is used.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        read_ns = time.perf_counter_ns()
        while not self.closed:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(_RECV_BYTES, _ANC_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._stop_reading()
                break
            if not data:
                self._stop_reading()
                break
            stamp = _kernel_ns(ancillary, read_ns)
            READ_LATENESS.add(read_ns - stamp)
            self.segments.append(Segment(stamp, data))
        self._wake()

    def _stop_reading(self) -> None:
        self._loop.remove_reader(self.sock.fileno())
        self._mark_closed()

    async def send(self, data: bytes) -> None:
        await self._loop.sock_sendall(self.sock, data)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            if not self.closed:
                self._loop.remove_reader(self.sock.fileno())
            self.sock.close()
        self.closed = True


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("qq")
_RECV_BYTES = 256 * 1024
_ANC_BYTES = socket.CMSG_SPACE(_TIMESPEC.size)
KERNEL_STAMPS = sys.platform.startswith("linux")


_OFFSET_TTL_NS = 50_000_000
_offset_cache: list[int] = [0, -_OFFSET_TTL_NS]  # [offset, perf_counter_ns when read]


def _clock_offset() -> int:
    """CLOCK_REALTIME - perf_counter, read again when 50 ms old (a clock step shows within that; the stamp is
    clamped to the read time in any case)."""
    now = time.perf_counter_ns()
    if now - _offset_cache[1] > _OFFSET_TTL_NS:
        _offset_cache[0], _offset_cache[1] = _read_clock_offset(), now
    return _offset_cache[0]


def _read_clock_offset() -> int:
    """CLOCK_REALTIME - perf_counter, read between two perf_counter reads close together (a preemption
    between the reads would shift the converted stamp); the tightest of up to three tries."""
    best: tuple[int, int] | None = None
    for _ in range(3):
        before = time.perf_counter_ns()
        real = time.time_ns()
        after = time.perf_counter_ns()
        if best is None or after - before < best[0]:
            best = (after - before, real - (before + after) // 2)
        if after - before < 20_000:
            break
    assert best is not None
    return best[1]


def _kernel_ns(ancillary: list[tuple[int, int, bytes]], read_ns: int) -> int:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return min(read_ns, int(sec) * 1_000_000_000 + int(nsec) - _clock_offset())
    return read_ns


@dataclass(slots=True)
class ResponseStart:
    status: int
    headers: dict[str, str]
    arrived_ns: int
    first_byte_ns: int


@dataclass
class HTTPStream:
    """An open response: its status line and an iterator over stamped body segments."""

    start: ResponseStart
    _protocol: _Receiver
    _conn: h11.Connection
    _read_timeout: float
    _leftover: list[Segment] = field(default_factory=list)
    _ended: bool = False

    async def body(self) -> AsyncIterator[Segment]:
        """Yield body bytes with the arrival time of the read that carried them."""
        pending, self._leftover = self._leftover, []
        while True:
            for seg in pending:
                for piece in self._pull(seg):
                    yield piece
            if self._ended:
                return
            pending = await _take_with_timeout(self._protocol, self._read_timeout)
            if not pending:  # the peer closed the connection
                self._conn.receive_data(b"")
                self._pull(Segment(0, b""))
                if not self._ended:
                    raise PeerClosed("connection closed mid-response")
                return

    def _pull(self, seg: Segment) -> list[Segment]:
        if seg.data:
            self._conn.receive_data(seg.data)
        out: list[Segment] = []
        while not self._ended:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise PeerClosed(f"connection closed mid-response ({exc})") from exc
            if isinstance(event, h11.Data):
                out.append(Segment(seg.arrived_ns, bytes(event.data)))
            elif isinstance(event, h11.EndOfMessage):
                self._ended = True
            else:  # NEED_DATA, PAUSED, ConnectionClosed
                break
        return out

    def close(self) -> None:
        self._protocol.close()


async def _take_with_timeout(protocol: _Receiver, timeout: float) -> list[Segment]:
    try:
        async with asyncio.timeout(timeout):
            return await protocol.take()
    except TimeoutError as exc:
        raise IdleTimeout(f"no data for {timeout:g} s") from exc


@dataclass(slots=True)
class RequestStamps:
    """``sent_ns``: when the last request byte was handed to the kernel. It is read after the write
    returns, so a process preempted right there could read it after the (kernel-stamped) reply began to
    arrive; :func:`post_stream` then clamps it to the first byte's arrival, never before ``send_started_ns``."""

    send_started_ns: int | None = None
    sent_ns: int | None = None


def split_url(url: str) -> tuple[str, str, int, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port, path


async def post_stream(
    url: str,
    body: bytes,
    *,
    headers: dict[str, str],
    stamps: RequestStamps,
    connect_timeout: float,
    read_timeout: float,
) -> HTTPStream:
    """Open a connection, POST ``body`` and return once the response headers are in."""
    scheme, host, port, path = split_url(url)
    try:
        async with asyncio.timeout(connect_timeout):
            receiver = await _connect(scheme, host, port)
    except TimeoutError as exc:
        raise ConnectFailed(f"connect to {host}:{port} timed out after {connect_timeout:g} s") from exc
    except OSError as exc:
        raise ConnectFailed(f"connect to {host}:{port}: {exc.strerror or exc}") from exc
    conn = h11.Connection(our_role=h11.CLIENT)
    request = h11.Request(method="POST", target=path, headers=_headers(host, port, body, headers))
    wire = conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    try:
        stamps.send_started_ns = time.perf_counter_ns()
        await receiver.send(wire)
        stamps.sent_ns = time.perf_counter_ns()
        stream = await _read_head(receiver, conn, read_timeout)
        if stream.start.first_byte_ns < stamps.sent_ns:
            stamps.sent_ns = max(stamps.send_started_ns, stream.start.first_byte_ns)
        return stream
    except BaseException:
        receiver.close()
        raise


async def _connect(scheme: str, host: str, port: int) -> _Receiver:
    loop = asyncio.get_running_loop()
    if scheme == "https" or not KERNEL_STAMPS:
        ssl_ctx = ssl.create_default_context() if scheme == "https" else None
        _, protocol = await loop.create_connection(_StampingProtocol, host, port, ssl=ssl_ctx)
        return protocol
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return _KernelStampedSocket(sock)


def _headers(host: str, port: int, body: bytes, extra: dict[str, str]) -> list[tuple[str, str]]:
    headers = {
        "Host": f"{host}:{port}",
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "Content-Length": str(len(body)),
        "Connection": "close",
        "User-Agent": "servelab",
    }
    headers.update(extra)
    return list(headers.items())


async def _read_head(protocol: _Receiver, conn: h11.Connection, read_timeout: float) -> HTTPStream:
    first_byte_ns: int | None = None
    while True:
        segments = await _take_with_timeout(protocol, read_timeout)
        if not segments:
            raise PeerClosed("connection closed before the response headers")
        for i, seg in enumerate(segments):
            first_byte_ns = first_byte_ns or seg.arrived_ns
            conn.receive_data(seg.data)
            response = _next_response(conn)
            if response is None:
                continue
            start = ResponseStart(
                status=response.status_code,
                headers={k.decode().lower(): v.decode("latin-1") for k, v in response.headers},
                arrived_ns=seg.arrived_ns,
                first_byte_ns=first_byte_ns,
            )
            stream = HTTPStream(start, protocol, conn, read_timeout)
            # bytes after the head in this segment are already inside h11; feed the rest later
            stream._leftover = [Segment(seg.arrived_ns, b""), *segments[i + 1 :]]
            return stream


def _next_response(conn: h11.Connection) -> h11.Response | None:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise PeerClosed(f"bad HTTP response: {exc}") from exc
        if isinstance(event, h11.Response):
            return event
        if isinstance(event, h11.InformationalResponse):
            continue
        return None
