"""Incremental Server-Sent Events parsing over timestamped byte segments.

An event is dispatched with the arrival time of the segment that completed it, so an event
split across reads is stamped when its last byte arrived.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class SSEEvent:
    arrived_ns: int
    data: str
    event: str = "message"


MAX_EVENT_BYTES = 16 << 20  # one event past this is a hostile or broken server, not a reply


class EventTooLarge(ValueError):
    """An event grew past :data:`MAX_EVENT_BYTES` without its blank line."""


class SSEDecoder:
    """Feed bytes as they arrive; get back the events they complete.

    Follows the WHATWG rules that matter for LLM servers: ``\\n``, ``\\r\\n`` and ``\\r`` line
    ends, ``field: value`` with one optional space, multi-line ``data`` joined by ``\\n``,
    comment lines (``: ping``) ignored, a blank line dispatches. Bytes are kept until a blank line
    completes an event block; the common block, one ``data: `` line, takes a fast path. An unfinished
    event is kept as its pieces and only each new piece is searched, so a server that never ends one
    costs linear time, up to ``max_event_bytes`` (then :class:`EventTooLarge`).
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._pending_cr = False
        self._ends_nl = False  # the kept bytes end with a line end: a new piece starting with one ends the event
        self.max_event_bytes = max_event_bytes

    def feed(self, chunk: bytes, arrived_ns: int) -> list[SSEEvent]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not chunk:
            return []
        if b"\n\n" not in chunk and not (self._ends_nl and chunk.startswith(b"\n")):
            self._keep(chunk)
            return []
        text = b"".join((*self._parts, chunk)) if self._parts else chunk
        blocks = text.split(b"\n\n")
        self._parts, self._size, self._ends_nl = [], 0, False
        self._keep(blocks.pop())
        events: list[SSEEvent] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append(SSEEvent(arrived_ns, block[6:].decode("utf-8", errors="replace")))
            elif block:
                events += _block(block, arrived_ns)
        return events

    def flush(self, arrived_ns: int) -> list[SSEEvent]:
        """End of stream: dispatch a last event that lacked its blank line."""
        block = b"".join(self._parts)
        self._parts, self._size, self._ends_nl = [], 0, False
        return _block(block, arrived_ns) if block else []

    def _keep(self, piece: bytes) -> None:
        if not piece:
            return
        self._parts.append(piece)
        self._size += len(piece)
        self._ends_nl = piece.endswith(b"\n")
        if self._size > self.max_event_bytes:
            raise EventTooLarge(f"an SSE event grew past {self.max_event_bytes:,} bytes without ending")


def _block(block: bytes, arrived_ns: int) -> list[SSEEvent]:
    """An event block line by line (blank lines inside it dispatch, as the rules say)."""
    events: list[SSEEvent] = []
    data: list[str] = []
    event = "message"
    for line in block.decode("utf-8", errors="replace").split("\n"):
        if line == "":
            if data:
                events.append(SSEEvent(arrived_ns, "\n".join(data), event))
            data, event = [], "message"
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value or "message"
    if data:
        events.append(SSEEvent(arrived_ns, "\n".join(data), event))
    return events
