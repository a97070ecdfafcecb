"""Streamed speech as the TTS servers people run send it, read into (arrival, seconds of audio) pieces:

- ``audio``: raw PCM or a WAV stream over chunked HTTP (Kokoro-FastAPI, vLLM-Omni with ``stream_format: "audio"``);
- ``sse``: OpenAI's ``speech.audio.delta`` events, base64 audio in each (vLLM-Omni's ``stream: true``), ended by
  ``speech.audio.done`` or ``speech.audio.error``; a delta may hold PCM or a whole WAV of its own;
- ``websocket``: vLLM-Omni's ``/v1/audio/speech/stream`` (``session.config``, ``input.text``, ``input.done``; then
  ``audio.start`` with the format and rate, binary PCM frames, ``audio.done``, ``session.done``).

Durations come from the bytes and the sample format: whole frames only, a frame split across reads carried over.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass
from typing import Any, cast

from servelab.core.errors import UsageError

SHAPES = ("audio", "sse", "websocket")


@dataclass
class AudioFormat:
    sample_rate: int = 24000
    channels: int = 1
    sample_bytes: int = 2

    @property
    def bytes_per_second(self) -> int:
        return self.sample_rate * self.channels * self.sample_bytes

    @property
    def frame(self) -> int:
        return self.channels * self.sample_bytes


def parse_wav_header(head: bytes) -> tuple[AudioFormat, int] | None:
    """(format, offset of the sample data) from the start of a WAV stream; None until enough bytes are in.
    A streamed WAV header may carry 0 or 0xFFFFFFFF as sizes: only ``fmt `` and the start of ``data`` count."""
    if len(head) < 12:
        return None
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise UsageError("the audio stream is not WAV (no RIFF/WAVE header); use --audio-format pcm")
    pos, fmt = 12, None
    while pos + 8 <= len(head):
        cid, size = head[pos : pos + 4], struct.unpack("<I", head[pos + 4 : pos + 8])[0]
        if cid == b"fmt ":
            if pos + 24 > len(head):
                return None
            _, channels, rate, _, _, bits = struct.unpack("<HHIIHH", head[pos + 8 : pos + 24])
            fmt = AudioFormat(rate, channels, bits // 8)
        elif cid == b"data":
            return (fmt, pos + 8) if fmt else None
        pos += 8 + size + (size & 1)
    return None


class AudioBytes:
    """Seconds of audio in a byte stream, fed as it arrives: a WAV header first when ``wav`` (its format then
    replaces the given one), whole frames counted, a partial frame carried to the next feed."""

    def __init__(self, fmt: AudioFormat, wav: bool) -> None:
        self.fmt, self._head, self._carry = fmt, b"" if wav else None, 0

    def feed(self, data: bytes) -> float:
        if self._head is not None:
            self._head += data
            parsed = parse_wav_header(self._head)
            if parsed is None:
                return 0.0
            self.fmt, offset = parsed
            data, self._head = self._head[offset:], None
        total = self._carry + len(data)
        frames, self._carry = divmod(total, self.fmt.frame)
        return frames / self.fmt.sample_rate


class SseAudio:
    """``speech.audio.*`` events parsed from SSE bytes as they arrive; ``feed`` gives the seconds of audio the
    completed events carried. ``done`` once the terminal event came; ``error`` holds the server's words."""

    def __init__(self, fmt: AudioFormat) -> None:
        self._pcm = AudioBytes(fmt, wav=False)
        self._buffer = b""
        self.done, self.error = False, cast(str | None, None)

    def feed(self, data: bytes) -> float:
        self._buffer += data.replace(b"\r\n", b"\n")
        seconds = 0.0
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            payload = b"\n".join(line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:"))
            if payload and payload != b"[DONE]":
                seconds += self._event(payload)
        return seconds

    def _event(self, payload: bytes) -> float:
        try:
            event: dict[str, Any] = json.loads(payload)
        except ValueError:
            self.error = f"an SSE event that is not JSON: {payload[:80]!r}"
            return 0.0
        kind = event.get("type")
        if kind == "speech.audio.done":
            self.done = True
        elif kind in ("speech.audio.error", "error"):
            self.error, self.done = _message(event), True
        elif kind == "speech.audio.delta":
            return self._delta(event.get("audio"))
        return 0.0

    def _delta(self, audio: object) -> float:
        try:
            raw = base64.b64decode(audio if isinstance(audio, str) else "", validate=True)
        except (binascii.Error, ValueError):
            self.error = "a speech.audio.delta whose audio is not base64"
            return 0.0
        if raw.startswith(b"RIFF"):  # a whole WAV in one delta (some servers)
            return AudioBytes(self._pcm.fmt, wav=True).feed(raw)
        return self._pcm.feed(raw)


def _message(event: dict[str, Any]) -> str:
    err = event.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err or event.get("message") or event)


def websocket_url(url: str) -> str:
    """ws(s):// for an http(s):// URL (the endpoint the user gave), as it is otherwise."""
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(http):
            return ws + url[len(http) :]
    return url


def websocket_config(body: dict[str, Any]) -> dict[str, Any]:
    """vLLM-Omni's session.config: the REST fields of the request, PCM streamed in pieces."""
    config = {k: v for k, v in body.items() if k not in ("input", "stream", "stream_format")}
    return {"type": "session.config", **config, "response_format": "pcm", "stream_audio": True}
