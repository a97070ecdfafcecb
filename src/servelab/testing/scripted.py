"""An in-process transport for the streaming client (``ClientOptions(transport=Scripted(...))``): it answers from a
script — a status, headers, body pieces each after a delay, then the end, a disconnect or silence — so a fault
test runs without a socket. The kernel-stamped socket transport stays the client's default; tests about timing
precision keep a real socket."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servelab.engines.transport import ConnectFailed, IdleTimeout, PeerClosed, RequestStamps, ResponseStart, Segment


def sse_chat(texts: Sequence[str], finish: str | None = "stop", usage: dict[str, int] | None = None) -> list[bytes]:
    """OpenAI-style chat chunks for ``texts`` (one event each), a finish, a usage chunk if given, then [DONE]."""

    def event(body: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {"id": "s", "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "finish_reason": reason}]}  # fmt: skip

    out = [event(chunk({"role": "assistant", "content": t})) for t in texts]
    if finish is not None:
        out.append(event(chunk({}, finish)))
    if usage is not None:
        out.append(event({"id": "s", "object": "chat.completion.chunk", "choices": [], "usage": usage}))
    return [*out, b"data: [DONE]\n\n"]


@dataclass
class Scripted:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    pieces: Sequence[bytes] = ()
    gap_s: float = 0.0  # before each piece
    then: Literal["end", "disconnect", "silence"] = "end"
    refuse: bool = False  # the connection cannot be opened
    sent: list[dict[str, Any]] = field(default_factory=list)  # what the client sent (url, headers, body)

    async def __call__(
        self,
        url: str,
        body: bytes,
        *,
        headers: dict[str, str],
        stamps: RequestStamps,
        connect_timeout: float,
        read_timeout: float,
    ) -> ScriptedStream:
        if self.refuse:
            raise ConnectFailed(f"scripted refusal of {url}")
        self.sent.append({"url": url, "headers": dict(headers), "body": json.loads(body)})
        stamps.send_started_ns = stamps.sent_ns = time.perf_counter_ns()
        now = time.perf_counter_ns()
        start = ResponseStart(self.status, {k.lower(): v for k, v in self.headers.items()}, now, now)
        return ScriptedStream(start, list(self.pieces), self.gap_s, self.then, read_timeout)


@dataclass
class ScriptedStream:
    start: ResponseStart
    pieces: list[bytes]
    gap_s: float
    then: str
    read_timeout: float
    closed: bool = False

    async def body(self) -> AsyncIterator[Segment]:
        for piece in self.pieces:
            if self.gap_s > self.read_timeout:
                await asyncio.sleep(self.read_timeout)
                raise IdleTimeout(f"no data for {self.read_timeout:g} s")
            await asyncio.sleep(self.gap_s)
            yield Segment(time.perf_counter_ns(), piece)
        if self.then == "disconnect":
            raise PeerClosed("connection closed mid-response (scripted)")
        if self.then == "silence":
            await asyncio.sleep(self.read_timeout)
            raise IdleTimeout(f"no data for {self.read_timeout:g} s")

    def close(self) -> None:
        self.closed = True
