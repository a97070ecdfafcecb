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


class SSEDecoder:
    """Feed bytes as they arrive; get back the events they complete.

    Follows the WHATWG rules that matter for LLM servers: ``\\n``, ``\\r\\n`` and ``\\r`` line
    ends, ``field: value`` with one optional space, multi-line ``data`` joined by ``\\n``,
    comment lines (``: ping``) ignored, a blank line dispatches.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event = "message"
        self._pending_cr = False

    def feed(self, chunk: bytes, arrived_ns: int) -> list[SSEEvent]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = chunk.endswith(b"\r")
        text = self._buffer + chunk
        lines = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._buffer = lines.pop()
        events: list[SSEEvent] = []
        for raw in lines:
            event = self._line(raw.decode("utf-8", errors="replace"), arrived_ns)
            if event is not None:
                events.append(event)
        return events

    def flush(self, arrived_ns: int) -> list[SSEEvent]:
        """End of stream: dispatch a last event that lacked its blank line."""
        events: list[SSEEvent] = []
        if self._buffer:
            event = self._line(self._buffer.decode("utf-8", errors="replace"), arrived_ns)
            self._buffer = b""
            if event is not None:
                events.append(event)
        final = self._line("", arrived_ns)
        if final is not None:
            events.append(final)
        return events

    def _line(self, line: str, arrived_ns: int) -> SSEEvent | None:
        if line == "":
            return self._dispatch(arrived_ns)
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or "message"
        return None

    def _dispatch(self, arrived_ns: int) -> SSEEvent | None:
        if not self._data:
            self._event = "message"
            return None
        event = SSEEvent(arrived_ns, "\n".join(self._data), self._event)
        self._data = []
        self._event = "message"
        return event
