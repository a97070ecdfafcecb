"""One upstream stream relayed to its client from the upstream connection's read callback: each read's complete
SSE events go through the :class:`EventRelay` and out of the client's :class:`Outlet` at once, with no task,
generator or loop turn between the upstream's bytes and the client's write. The handler's task only waits for
the end (:attr:`Pipe.done`) and says in band what went wrong; a client that leaves cancels that wait, and the
handler closes the upstream response (an abort upstream)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from servelab.gateway.client import UpstreamError, UpstreamResponse
from servelab.gateway.outlet import Outlet
from servelab.gateway.sse import EventRelay

Headers = list[tuple[str, str]]


class Pipe:
    def __init__(self, outlet: Outlet, relay: EventRelay, headers: Headers) -> None:
        loop = asyncio.get_running_loop()
        self.outlet, self.relay, self.headers = outlet, relay, headers
        self.first: asyncio.Future[UpstreamError | None] = loop.create_future()  # the first body byte (or why not)
        self.done: asyncio.Future[UpstreamError | None] = loop.create_future()  # the end (or why it broke off)
        self.watch: Watchdog | None = None

    def open(self, response: UpstreamResponse) -> None:
        """The upstream answered 200: its body goes straight to the client from now on."""
        self.outlet.prepare(200, self.headers + passed_on(response.headers))
        self.outlet.on_pause = response.pause
        response.attach(self)

    # ---- the upstream connection's callbacks ----------------------------------------------------------
    def piece(self, data: bytes) -> None:
        if out := self.relay.feed(data):
            self.outlet.send(out)
        if self.watch is not None:
            self.watch.touch()
        if not self.first.done():
            self.first.set_result(None)

    def hold(self) -> None:
        self.outlet.hold()

    def flush(self) -> None:
        self.outlet.flush()

    def ended(self) -> None:
        """The upstream's body ended: the client's ends in the same read callback (with the last pieces, in one
        write), before the handler's task wakes to see it."""
        if self.first.done():
            self.outlet.send(self.relay.flush())
            self.outlet.end()
        self._settle(None)

    def failed(self, error: UpstreamError) -> None:
        self._settle(error)

    def _settle(self, outcome: UpstreamError | None) -> None:
        if not self.first.done():
            self.first.set_result(outcome)
            if outcome is not None:
                return  # failed before its first byte: the request may go elsewhere; nobody waits for the end
        if not self.done.done():
            self.done.set_result(outcome)

    def close(self) -> None:
        self.outlet.on_pause = None
        if self.watch is not None:
            self.watch.stop()


class Watchdog:
    """Calls ``fire`` when ``touch`` has not been called for ``seconds``: one timer, re-armed only when it
    comes due, so ``touch`` is a clock read and a store."""

    def __init__(self, seconds: float, fire: Callable[[], None]) -> None:
        self.loop, self.seconds, self._fire = asyncio.get_running_loop(), seconds, fire
        self.mark, self.fired = self.loop.time(), False
        self.timer: asyncio.TimerHandle | None = self.loop.call_at(self.mark + seconds, self._check)

    def touch(self) -> None:
        self.mark = self.loop.time()

    def _check(self) -> None:
        if self.loop.time() - self.mark >= self.seconds:
            self.fired, self.timer = True, None
            self._fire()
        else:
            self.timer = self.loop.call_at(self.mark + self.seconds, self._check)

    def stop(self) -> None:
        if self.timer:
            self.timer.cancel()


def passed_on(upstream: dict[bytes, bytes]) -> Headers:
    """The upstream headers a client should see: its Retry-After (so a 429 is not retried at once)."""
    return [(name.decode(), upstream[name].decode("latin-1")) for name in (b"retry-after",) if name in upstream]
