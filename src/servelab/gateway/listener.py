"""The listening server: its connections (held up to a cap, :mod:`.slots`) and the one timer that sweeps every
connection's deadlines (none per connection or request)."""

from __future__ import annotations

import asyncio

from servelab.gateway.messages import Handler, ServerHooks, ServerLimits
from servelab.gateway.poll import BusyPoll
from servelab.gateway.server import Connection
from servelab.gateway.slots import Slots


class Listener:
    """The listening server and its open connections (closed with it), whose deadlines one timer sweeps."""

    def __init__(self, server: asyncio.Server, slots: Slots[Connection], limits: ServerLimits) -> None:
        self.server, self.slots = server, slots
        self.loop = asyncio.get_running_loop()
        timeouts = (limits.header_timeout_s, limits.body_timeout_s, limits.body_pause_s, limits.keepalive_s)
        shortest = min(t for t in timeouts if t > 0)
        self.every = min(1.0, max(0.05, shortest / 8))  # a deadline is kept to within an eighth of itself
        self._sweeper = self.loop.call_later(self.every, self._sweep)

    @property
    def live(self) -> set[Connection]:
        return self.slots.live

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
    hooks: ServerHooks | None = None,
) -> Listener:
    """Listen and serve ``handler``; ``reuse_port`` lets several worker processes share one port; ``poll`` is
    told of every request in and answered (:mod:`.poll`); ``hooks`` see each request's head and each answer."""
    loop = asyncio.get_running_loop()
    slots: Slots[Connection] = Slots(limits.max_connections)
    poll = poll or BusyPoll(loop)
    given = hooks or ServerHooks()
    server = await loop.create_server(lambda: Connection(handler, limits, slots, poll, given), host, port,
                                      reuse_port=reuse_port or None, backlog=4096)  # fmt: skip
    return Listener(server, slots, limits)
