"""The access log's writer: lines gathered and written in batches by a thread of its own (the event loop appends
and never waits, nor wakes a thread per request), in order, none lost; a stream that blocks makes lines drop
past the capacity, counted and said once the stream takes lines again."""

from __future__ import annotations

import logging
import threading
import time

from servelab.gateway.access import _Lines


class Recorder:
    """A stream that records its writes; ``gate`` cleared, a write blocks (a pipe nobody reads)."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def write(self, text: str) -> int:
        self.gate.wait()
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def _record(i: int) -> logging.LogRecord:
    return logging.LogRecord("servelab.gateway.access", logging.INFO, __file__, 0, f"line {i} 100%", (), None)


def test_lines_are_written_in_batches_in_order() -> None:
    stream = Recorder()
    handler = _Lines(stream, capacity=10_000, every_s=0.05)  # type: ignore[arg-type]
    for i in range(2000):
        handler.emit(_record(i))
    handler.drain(5.0)  # returns once the last batch is written, not only taken
    for _ in range(200):  # the writer sleeps again after a drain (it spun on the event a drain sets)
        if not handler._now.is_set():
            break
        time.sleep(0.01)
    assert not handler._now.is_set()
    handler.close()
    lines = "".join(stream.writes).splitlines()
    assert lines == [f"line {i} 100%" for i in range(2000)]
    assert len(stream.writes) < 20  # gathered, not a write (and a thread wake-up) per line


def test_a_blocked_stream_drops_past_the_capacity_and_says_so() -> None:
    stream = Recorder()
    handler = _Lines(stream, capacity=100, every_s=0.01)  # type: ignore[arg-type]
    handler.emit(_record(-1))
    time.sleep(0.1)  # the writer took it and is now blocked writing it
    stream.gate.clear()
    handler.emit(_record(-2))
    time.sleep(0.1)
    loop = threading.Thread(target=lambda: [handler.emit(_record(i)) for i in range(500)])
    loop.start()
    loop.join(timeout=30)
    assert not loop.is_alive(), "emit waited on the blocked stream"
    assert handler.dropped >= 300
    stream.gate.set()
    handler.drain(5.0)
    handler.close()
    said = "".join(stream.writes)
    assert f"{handler.dropped} log lines dropped (stderr was not read)" in said
    assert not any(t.name == "servelab-gateway-log" and t.is_alive() for t in threading.enumerate())
