"""The gateway's upstream connection pool never sends a request twice. Against FIXTURE servers, since no real
engine, on demand, reads a request and drops it, or closes a given idle connection: a request the upstream read
and then dropped (its connection closed with no answer) is not written again, anywhere on that upstream (the
upstream may have acted on it: a paid call charged twice); a pooled connection the server closed while it sat
idle is passed over before anything is written to it; one idle past ``max_idle_s`` is not reused."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from servelab.gateway.client import HttpClient, UpstreamError

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request read whole; its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
    return await reader.readexactly(length)


class Upstream:
    """Answers the first request on each connection and keeps it open; with ``drop``, a later request on it is
    read whole and the connection closed unanswered; without, the connection is closed right after the answer
    (the client sees it close while pooled). ``bodies``: every request body read, in order."""

    def __init__(self, drop: bool) -> None:
        self.drop, self.connections, self.bodies = drop, 0, list[bytes]()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for turn in range(2):
                self.bodies.append(await read_request(reader))
                if turn:
                    return  # the second request on this connection: read whole, then dropped unanswered
                writer.write(OK)
                await writer.drain()
                if not self.drop:
                    return  # closed right after its answer
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _exchange(
    upstream: Upstream, later: int, settle: bool = False, **client: float
) -> tuple[list[object], list[bytes]]:
    """Two requests at once, then ``later`` one by one (with ``settle``, each once the client has seen the
    server close its pooled connections); the outcomes (status or error) and the bodies the server read."""
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    http = HttpClient(f"http://127.0.0.1:{port}/v1", **client)  # type: ignore[arg-type]
    outcomes: list[object] = []
    try:
        # two at once: two connections, both pooled once answered
        first = await asyncio.gather(*(http.post("/chat/completions", b'{"n": %d}' % i, timeout=5) for i in range(2)))
        outcomes += [status for status, _ in first]
        for i in range(later):
            if settle:
                await _closes_seen(http)
            try:
                outcomes.append((await http.post("/chat/completions", b'{"n": %d}' % (10 + i), timeout=5))[0])
            except UpstreamError as exc:
                outcomes.append(exc)
    finally:
        await http.aclose()
        server.close()
        await server.wait_closed()
    return outcomes, upstream.bodies


async def _closes_seen(http: HttpClient) -> None:
    """Wait until the client has seen every close the server made of a pooled connection (no time margin: the
    condition itself, bounded only so that a broken test ends)."""
    for _ in range(1000):
        if all(conn.closed for conn in http._idle):
            return
        await asyncio.sleep(0.01)


def test_a_request_the_upstream_read_and_dropped_is_never_sent_again() -> None:
    outcomes, bodies = asyncio.run(_exchange(Upstream(drop=True), later=3))
    assert outcomes[:2] == [200, 200]
    for failed in outcomes[2:4]:  # each read on a pooled connection and dropped: an error saying it was sent
        assert isinstance(failed, UpstreamError) and failed.sent, failed
    assert outcomes[4] == 200  # the pool empty: a new connection, its first request answered
    assert len(bodies) == len(set(bodies)) == 5, bodies  # every request read exactly once


def test_a_connection_the_server_closed_while_pooled_is_passed_over() -> None:
    """The server closes each connection after its answer: the pooled one is seen closed before anything is
    written to it, so the request goes on a new connection (nothing of it had been sent), once."""
    outcomes, bodies = asyncio.run(_exchange(Upstream(drop=False), later=3, settle=True))
    assert outcomes == [200] * 5
    assert len(bodies) == len(set(bodies)) == 5


@pytest.mark.parametrize(("max_idle_s", "connections"), [(3600.0, 2), (0.0, 5)])
def test_a_connection_idle_too_long_is_not_reused(max_idle_s: float, connections: int) -> None:
    """Servers close idle keep-alive connections on their own clock; past ``max_idle_s`` the gateway does not
    write to one (a request written as the server closes could not be sent again)."""

    class Keeping(Upstream):
        async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                while True:
                    self.bodies.append(await read_request(reader))
                    writer.write(OK)
                    await writer.drain()
            writer.close()

    upstream = Keeping(drop=False)
    outcomes, _ = asyncio.run(_exchange(upstream, later=3, max_idle_s=max_idle_s))
    assert outcomes == [200] * 5
    assert upstream.connections == connections
