"""Passing an upstream SSE stream on event by event: raw bytes unchanged, the usage-only chunk recorded and
dropped unless the client asked for it. Only whole events go on: a partial last event is held back, and at the
end dropped, never passed on as whole; a stream that did not end with ``data: [DONE]`` (cut short, or not an
event stream at all) ends with an error event saying so."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_EVENT_BYTES = 1 << 20  # a partial event held back longer than this is passed on unread (a stream that never
# ends an event would otherwise grow the buffer, and its re-scans, without bound)
TRUNCATED = "upstream_truncated"


class EventRelay:
    def __init__(self, keep_usage_chunk: bool, on_usage: Callable[[dict[str, Any]], None]) -> None:
        self.keep_usage_chunk, self.on_usage = keep_usage_chunk, on_usage
        self._buffer = b""
        self.finished = False  # the last whole event passed on was data: [DONE]
        self.cut = False  # a partial event went out unread (past MAX_EVENT_BYTES) and has not ended since
        self.broken: str | None = None  # why the stream did not end whole (an error kind), once known
        self._why = ""

    def feed(self, data: bytes) -> bytes:
        """The complete events in ``data`` (with what was held back), as bytes to send on. A read of whole
        events with no usage in them (nearly every read) is passed on as it is, with four byte scans."""
        if self.broken is not None:
            return b""  # refused at its head: nothing of it goes on
        if not self._buffer and data.endswith(b"\n\n") and b"\r" not in data and b'"usage"' not in data:
            self.finished, self.cut = data.endswith(b"[DONE]\n\n"), False
            return data
        self._buffer += data.replace(b"\r\n", b"\n")
        *events, self._buffer = self._buffer.split(b"\n\n")
        if events:
            last = events[-1]
            self.finished, self.cut = last.startswith(b"data:") and last.endswith(b"[DONE]"), False
        out = b"".join(kept + b"\n\n" for event in events if (kept := self._event(event)) is not None)
        if len(self._buffer) > MAX_EVENT_BYTES:
            out, self._buffer, self.cut, self.finished = out + self._buffer, b"", True, False
        return out

    def flush(self) -> bytes:
        """What is held back (a partial event), taken out."""
        rest, self._buffer = self._buffer, b""
        return rest

    def refuse(self, kind: str, message: str) -> None:
        """The answer is not a stream this relay can pass on (not SSE, or compressed): none of it goes on, and
        its end is an error event of ``kind``."""
        self.broken, self._why = kind, message

    def end(self, kind: str | None = None, message: str = "") -> bytes | None:
        """What ends the client's stream: nothing when the stream ended whole; else an error event of ``kind``
        (the caller's: the upstream went silent or broke off), or of the stream's own fault (refused at its
        head, or cut short: a partial last event, no [DONE]). A partial event held back is dropped. None: a
        partial event already went out unread, so only breaking the body off (no end chunk) tells the client."""
        held, self._buffer = self._buffer, b""
        if kind is None and self.broken is None and not held and self.finished:
            return b""
        if kind is not None:
            self.broken, self._why = kind, message
        elif self.broken is None:
            self.broken = TRUNCATED
            self._why = "the upstream's stream ended " + ("inside an event" if held else "without data: [DONE]")
        return None if self.cut else error_event(self._why, self.broken)

    def _event(self, event: bytes) -> bytes | None:
        if b'"usage"' not in event:
            return event
        chunk = _data_json(event)
        if not isinstance(chunk, dict) or not isinstance(chunk.get("usage"), dict):
            return event
        self.on_usage(chunk["usage"])
        if chunk.get("choices") == [] and not self.keep_usage_chunk:
            return None
        return event


def _data_json(event: bytes) -> Any:
    lines = [ln[5:].strip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
    try:
        return json.loads(b"\n".join(lines))
    except ValueError:
        return None


def error_event(message: str, kind: str = "upstream_error") -> bytes:
    return b"data: " + json.dumps({"error": {"message": message, "type": kind}}).encode() + b"\n\n"
