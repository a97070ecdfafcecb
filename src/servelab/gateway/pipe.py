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
        self.paused = False  # the client is not taking what is sent (its socket buffer is full)
        self.response: UpstreamResponse | None = None
        self._finished = False

    def open(self, response: UpstreamResponse) -> None:
        """The upstream answered 200: its body goes straight to the client from now on; an answer that is not
        an event stream the relay can read is not passed on at all: the client's stream is only an error event."""
        self.outlet.prepare(200, self.headers + passed_on(response.headers))
        self.outlet.on_pause = self._client_paused
        self.response = response
        if (refused := not_a_stream(response)) is not None:
            self.relay.refuse(*refused)
            response.close()
            self.finish()
            self._settle(None)
            return
        response.attach(self)

    def _client_paused(self, paused: bool) -> None:
        """The client stopped (or went on) taking the stream: the upstream read follows it; the upstream's
        silence is counted again from when the client takes bytes again."""
        self.paused = paused
        if self.response is not None:
            self.response.pause(paused)
        if not paused and self.watch is not None:
            self.watch.touch()

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
            self.finish()
        self._settle(None)

    def failed(self, error: UpstreamError) -> None:
        self._settle(error)

    def finish(self, kind: str | None = None, message: str = "") -> None:
        """End the client's stream, once: whole, or with an error event saying why (:meth:`EventRelay.end`); a
        stream whose partial event already went out is left without its end (the server closes it)."""
        if self._finished:
            return
        self._finished = True
        tail = self.relay.end(kind, message)
        if tail is not None:
            self.outlet.send(tail)
            self.outlet.end()

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


def not_a_stream(response: UpstreamResponse) -> tuple[str, str] | None:
    """Why a 200 to a stream request cannot be passed on as one (an error kind and message), or None: it is
    compressed though the gateway asked for identity, or it is not an event stream."""
    encoding = response.header(b"content-encoding").strip().lower()
    if encoding not in ("", "identity"):
        return "upstream_encoded", f"the upstream sent its stream {encoding}-encoded (the gateway asked for identity)"
    kind = response.header(b"content-type")
    if not kind.lower().startswith("text/event-stream"):
        return "upstream_not_sse", f"the upstream answered 200 with {kind or 'no content-type'}, not an event stream"
    return None


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


STREAM_FIELDS = (b"retry-after",)
WHOLE_FIELDS = (b"retry-after", b"content-encoding")  # a whole answer's bytes go on as they came: their encoding too


def passed_on(upstream: dict[bytes, bytes], names: tuple[bytes, ...] = STREAM_FIELDS) -> Headers:
    """The upstream headers a client should see: its Retry-After (so a 429 is not retried at once); for a whole
    answer, its Content-Encoding (never stripped from bytes passed on compressed)."""
    return [(name.decode(), upstream[name].decode("latin-1")) for name in names if name in upstream]
