"""One structured line per request, when its answer is over: method, path, status, route, reason, failover and
how long it took (a JSON object on the ``servelab.gateway.access`` logger, stderr by default, written in batches by
a thread of its own so that a stderr nobody reads cannot stall the event loop)."""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import sys
import threading
import time
from typing import TextIO

import orjson

LOG = logging.getLogger("servelab.gateway.access")


def access_line(method: str, path: str, status: int | None, headers: list[tuple[str, str]], seconds: float) -> None:
    if not LOG.isEnabledFor(logging.INFO):
        return
    said = dict(headers)
    reason = said.get("x-servelab-reason")
    line = {"t": round(time.time(), 3), "method": method, "path": path, "status": status,
            "route": said.get("x-servelab-route"), "reason": reason,
            "failed_over": bool(reason and reason.startswith("failover_from_")),
            "tokens": said.get("x-servelab-tokens"), "ms": round(seconds * 1000, 2)}  # fmt: skip
    # the record made here, not by LOG.info: that walks the stack for the caller's file and line, per request
    LOG.handle(LOG.makeRecord(LOG.name, logging.INFO, __file__, 0, orjson.dumps(line).decode(), (), None))


class _Lines(logging.Handler):
    """Hands each formatted line to a writer thread and never waits: the event loop appends to a bounded deque
    (no lock, no wake-up: a thread woken per request would take the core and the GIL from the next request), and
    the writer takes what has gathered every ``every_s`` and writes it at once. A full deque (stderr not being
    read: a pipe nobody drains, a stalled log collector) drops the line and counts it, so a blocked log never
    blocks the event loop, which would stall every stream."""

    def __init__(self, stream: TextIO, capacity: int = 10_000, every_s: float = 0.05) -> None:
        super().__init__()
        self.stream, self.capacity, self.every_s = stream, capacity, every_s
        self.lines: collections.deque[str] = collections.deque()
        self.dropped = 0
        self.busy = False  # a batch taken and not yet written
        self._now = threading.Event()  # set to write at once (at exit)
        self._closed = False
        self._thread = threading.Thread(target=self._write, name="servelab-gateway-log", daemon=True)
        self._thread.start()
        atexit.register(self.drain, 2.0)

    def drain(self, seconds: float) -> None:
        """Wait (at most ``seconds``) for the writer to take the queued lines: a clean exit keeps its last lines."""
        deadline = time.monotonic() + seconds
        self._now.set()
        while (self.lines or self.busy) and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        """Write what is queued and stop the writer thread (logging calls this at shutdown)."""
        self.drain(2.0)
        self._closed = True
        self._now.set()
        self._thread.join(timeout=2.0)
        super().close()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if len(self.lines) >= self.capacity:
                self.dropped += 1
                return
            self.lines.append(self.format(record))
        except Exception:
            self.handleError(record)

    def _write(self) -> None:
        said = 0
        while not self._closed:
            if self._now.wait(self.every_s):
                self._now.clear()  # a drain asked for this one write, not for a writer that never sleeps again
            self.busy = bool(self.lines)
            batch = []
            while self.lines:
                batch.append(self.lines.popleft())
            if not batch:
                continue
            if self.dropped > said:  # tell once the stream takes lines again
                batch.insert(0, f"servelab gateway: {self.dropped - said} log lines dropped (stderr was not read)")
                said = self.dropped
            try:
                with contextlib.suppress(OSError, ValueError):
                    self.stream.write("\n".join(batch) + "\n")
                    self.stream.flush()
            finally:
                self.busy = False


def log_to_stderr(capacity: int = 10_000) -> None:
    """The access log and the start-up warnings on stderr, unless the embedding program set up logging itself;
    written by a thread of their own (:class:`_Lines`), ``capacity`` lines held while stderr is not read."""
    gateway = logging.getLogger("servelab.gateway")
    if not gateway.handlers and not logging.getLogger().handlers:
        handler = _Lines(sys.stderr, capacity)
        handler.setFormatter(logging.Formatter("%(message)s"))
        gateway.addHandler(handler)
        gateway.setLevel(logging.INFO)
