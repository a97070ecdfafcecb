"""One structured line per request, when its answer is over: method, path, status, route, reason, failover and
how long it took (a JSON object on the ``servelab.gateway.access`` logger, stderr by default, written by a thread
of its own so that a stderr nobody reads cannot stall the event loop)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
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
    LOG.info(orjson.dumps(line).decode())


class _Lines(logging.Handler):
    """Hands each formatted line to a writer thread through a bounded queue and never waits: a full queue (stderr
    not being read: a pipe nobody drains, a stalled log collector) drops the line and counts it, so a blocked log
    never blocks the event loop, which would stall every stream."""

    def __init__(self, stream: TextIO, capacity: int = 10_000) -> None:
        super().__init__()
        self.stream, self.lines = stream, queue.Queue[str](maxsize=capacity)
        self.dropped = 0
        threading.Thread(target=self._write, name="servelab-gateway-log", daemon=True).start()
        atexit.register(self.drain, 2.0)

    def drain(self, seconds: float) -> None:
        """Wait (at most ``seconds``) for the writer to take the queued lines: a clean exit keeps its last lines."""
        deadline = time.monotonic() + seconds
        while not self.lines.empty() and time.monotonic() < deadline:
            time.sleep(0.01)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.put_nowait(self.format(record))
        except queue.Full:
            self.dropped += 1
        except Exception:
            self.handleError(record)

    def _write(self) -> None:
        said = 0
        while True:
            line = self.lines.get()
            if self.dropped > said:  # tell once the stream takes lines again
                line = f"servelab gateway: {self.dropped - said} log lines dropped (stderr was not read)\n{line}"
                said = self.dropped
            with contextlib.suppress(OSError, ValueError):
                self.stream.write(line + "\n")
                self.stream.flush()


def log_to_stderr(capacity: int = 10_000) -> None:
    """The access log and the start-up warnings on stderr, unless the embedding program set up logging itself;
    written by a thread of their own (:class:`_Lines`), ``capacity`` lines held while stderr is not read."""
    gateway = logging.getLogger("servelab.gateway")
    if not gateway.handlers and not logging.getLogger().handlers:
        handler = _Lines(sys.stderr, capacity)
        handler.setFormatter(logging.Formatter("%(message)s"))
        gateway.addHandler(handler)
        gateway.setLevel(logging.INFO)
