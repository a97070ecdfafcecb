"""Passing an upstream SSE stream on event by event: raw bytes unchanged, the usage-only chunk recorded and
dropped unless the client asked for it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_EVENT_BYTES = 1 << 20  # a partial event held back longer than this is passed on unread (a stream that never
# ends an event would otherwise grow the buffer, and its re-scans, without bound)


class EventRelay:
    def __init__(self, keep_usage_chunk: bool, on_usage: Callable[[dict[str, Any]], None]) -> None:
        self.keep_usage_chunk, self.on_usage = keep_usage_chunk, on_usage
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        """The complete events in ``data`` (with what was held back), as bytes to send on. A read of whole
        events with no usage in them (nearly every read) is passed on as it is, with three byte scans."""
        if not self._buffer and data.endswith(b"\n\n") and b"\r" not in data and b'"usage"' not in data:
            return data
        self._buffer += data.replace(b"\r\n", b"\n")
        *events, self._buffer = self._buffer.split(b"\n\n")
        out = b"".join(kept + b"\n\n" for event in events if (kept := self._event(event)) is not None)
        if len(self._buffer) > MAX_EVENT_BYTES:
            out, self._buffer = out + self._buffer, b""
        return out

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest

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
