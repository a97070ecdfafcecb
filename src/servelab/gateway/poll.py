"""Busy polling, off by default: while a request is in flight, and for ``linger_s`` after the last one ended,
the event loop polls its sockets without sleeping, so the next byte (an upstream's first chunk, a client's next
request) is handled at once instead of after the wake-up of a sleeping process and an idle core. Costs one
core per worker while streams run; a realtime stack with a core to spare for its gateway trades that for about
a wake-up less per request leg."""

from __future__ import annotations

import asyncio


class BusyPoll:
    def __init__(self, loop: asyncio.AbstractEventLoop, linger_s: float) -> None:
        self.loop, self.linger_s = loop, linger_s
        self.busy = 0
        self.until = 0.0
        self.spinning = False

    @property
    def enabled(self) -> bool:
        return self.linger_s > 0

    def hold(self) -> None:
        """A request came in: poll until it is answered."""
        self.busy += 1
        if not self.spinning:
            self.spinning = True
            self.loop.call_soon(self._spin)

    def release(self) -> None:
        """A request was answered: go on polling for ``linger_s`` (the same client's next request)."""
        self.busy -= 1
        self.until = self.loop.time() + self.linger_s

    def _spin(self) -> None:
        # a ready callback makes the loop poll with a zero timeout; re-arming it keeps the loop from sleeping
        if self.busy > 0 or self.loop.time() < self.until:
            self.loop.call_soon(self._spin)
        else:
            self.spinning = False
