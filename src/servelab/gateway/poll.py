"""Polling instead of sleeping, where a wake-up would be on the latency path.

A sleeping process that gets a byte pays a wake-up (an idle core leaving its halt, on a virtual machine an exit
to the hypervisor) before it can pass the byte on: tens to a hundred microseconds per leg on an idle host, which
is most of what a proxy adds at one stream. Busy with many streams, the loop is awake anyway. So the loop polls
its sockets without sleeping (a ready callback re-armed every turn makes it poll with a zero timeout) only where
that pays:

- **first byte** (``first_byte_s``): from the write of a request to its upstream until the first byte of the
  answer comes back, at most ``first_byte_s`` (a long prefill is not polled through), while at most
  ``max_in_flight`` requests are in flight in this worker; then ``linger_s`` after each answer ends (the same
  client's next request). On by default where the host has cores to spare (:func:`auto_poll`).
- **always** (``busy_linger_s``, ``[server] busy_poll_us``): the whole time any request is in flight and that
  long after, at any load; one core per worker while streams run. Off by default.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass

SPARE_CORES = 8  # a host with fewer cores has none to spin: polling would take them from the engine and clients


@dataclass(frozen=True)
class PollSettings:
    first_byte_s: float = 0.0  # poll from an upstream write until its first byte, at most this long (0: off)
    linger_s: float = 0.0  # first-byte mode: poll this long after an answer ends
    max_in_flight: int = 4  # first-byte mode: only while at most this many requests are in flight in the worker
    busy_linger_s: float = 0.0  # always mode: poll while anything is in flight and this long after (0: off)

    @property
    def enabled(self) -> bool:
        return self.first_byte_s > 0 or self.busy_linger_s > 0


def auto_poll(cores: int | None = None) -> tuple[int, int]:
    """The first-byte poll's default (milliseconds, linger microseconds): 50 ms and 3 ms on a host with at least
    :data:`SPARE_CORES` cores, off on a smaller one. 3 ms: a Python client's turn from one answer's end to its next
    request took a median 1.9 ms (p90 3.2) on a 2-core machine, servelab's load generator included."""
    count = cores if cores is not None else (os.cpu_count() or 1)
    return (50, 3000) if count >= SPARE_CORES else (0, 0)


class BusyPoll:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        settings: PollSettings | None = None,
        on_linger: Callable[[], None] | None = None,
    ) -> None:
        """``loop`` may be None for a poller that is off (it never reads the loop); ``on_linger`` runs (on the
        loop's next turn) when a linger begins: a rehearsal that warms the request path (:mod:`.warm`)."""
        self.settings = settings or PollSettings()
        self._loop = loop
        self.on_linger = on_linger
        self.busy = 0  # requests in flight in this worker
        self.awaiting = 0  # of them, waiting for an upstream's first byte
        self.until = 0.0  # linger: poll until then
        self.first_until = 0.0  # first byte: poll until then while one is awaited
        self.spinning = False

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def hold(self) -> None:
        """A request came in."""
        self.busy += 1
        if self.settings.busy_linger_s > 0:
            self._start()

    def release(self) -> None:
        """A request was answered: poll on for the linger (the same client's next request)."""
        self.busy -= 1
        s = self.settings
        linger = s.busy_linger_s or (s.linger_s if self.busy <= s.max_in_flight else 0.0)
        if linger > 0:
            self.until = max(self.until, self.loop.time() + linger)
            self._start()
            if self.on_linger is not None:
                self.loop.call_soon(self.on_linger)

    def expect(self) -> None:
        """A request is about to go upstream: poll until :meth:`arrived` (at most ``first_byte_s``)."""
        s = self.settings
        if s.first_byte_s <= 0:
            return
        self.awaiting += 1
        self.first_until = self.loop.time() + s.first_byte_s
        if self.busy <= s.max_in_flight:
            self._start()

    def arrived(self) -> None:
        """The first byte came back (or the attempt ended without one)."""
        if self.settings.first_byte_s > 0:
            self.awaiting -= 1

    def _start(self) -> None:
        if not self.spinning:
            self.spinning = True
            self.loop.call_soon(self._spin)

    def _wanted(self) -> bool:
        s, now = self.settings, self.loop.time()
        if s.busy_linger_s > 0 and self.busy > 0:
            return True
        if now < self.until and (s.busy_linger_s > 0 or self.busy <= s.max_in_flight):
            return True
        return self.awaiting > 0 and now < self.first_until and self.busy <= s.max_in_flight

    def _spin(self) -> None:
        if self._wanted():
            self.loop.call_soon(self._spin)
        else:
            self.spinning = False
