"""The gateway's upstream connection pool against an upstream that closes idle keep-alive connections when a
request arrives on one (its keep-alive timeout running out at that moment): a FIXTURE server, since no real
engine closes a given connection on demand. A request that meets such a connection is sent once more on a new
connection, never on another pooled one the server may have closed as well."""

from __future__ import annotations

import asyncio

from servelab.gateway.client import HttpClient

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class ClosingIdle:
    """Answers the first request on each connection and keeps it open; a later request on it closes it unread."""

    def __init__(self) -> None:
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            writer.write(OK)
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # a second request on this connection: timed out, close it
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _run() -> tuple[list[int], int]:
    upstream = ClosingIdle()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = HttpClient(f"http://127.0.0.1:{port}/v1")
    try:
        # two at once: two connections, both pooled once answered
        first = await asyncio.gather(*(client.post("/chat/completions", b"{}", timeout=5) for _ in range(2)))
        # each of these meets a pooled connection the server closes on its request: sent again, on a new one
        later = [await client.post("/chat/completions", b"{}", timeout=5) for _ in range(3)]
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
    return [status for status, _ in first + later], upstream.connections


def test_a_request_on_a_connection_the_server_closed_is_retried_on_a_new_one() -> None:
    statuses, connections = asyncio.run(_run())
    assert statuses == [200] * 5
    assert connections == 2 + 3  # the two first, then a new one for each later request (its stale one dropped)
