"""A fixture SSE sink for load-generator benchmarks (not an LLM): every stream gets ``burst`` chat
chunks every ``itl_ms``, each chunk's content being the sink's perf_counter_ns() taken just before the
write, then usage and [DONE]. The first chunk's content is ``RECV:SENT``, RECV being when the sink had read
the whole request, so a client's TTFT can be split into its own lead and the sink's. Serves GET /v1/models.
Pin it to its own core.

usage: python sink.py PORT CHUNKS ITL_MS BURST [CPU]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

MODEL = "sink"


def _event(content: str) -> bytes:
    body = {
        "id": "s",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
MODELS = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()


async def stream(writer: asyncio.StreamWriter, chunks: int, itl: float, burst: int, recv_ns: int) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    writer.write(HEAD)
    sent = 0
    tick = 0
    while sent < chunks:
        await asyncio.sleep(max(0.0, start + tick * itl - loop.time()))
        n = min(burst, chunks - sent)
        head = f"{recv_ns}:" if sent == 0 else ""
        writer.write(_chunked(b"".join(_event(f"{head if i == 0 else ''}{time.perf_counter_ns()} ") for i in range(n))))
        sent += n
        tick += 1
    tail = {
        "id": "s",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 8, "completion_tokens": chunks, "total_tokens": chunks + 8},
    }
    writer.write(_chunked(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


async def handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunks: int, itl: float, burst: int
) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        first = head.split(b"\r\n", 1)[0]
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = await reader.readexactly(length) if length else b""
        recv_ns = time.perf_counter_ns()
        if first.startswith(b"GET"):
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (len(MODELS), MODELS)
            )
            await writer.drain()
            return
        want = json.loads(body or b"{}").get("max_tokens") or chunks
        await stream(writer, int(want), itl, burst, recv_ns)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main(port: int, chunks: int, itl_ms: float, burst: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, chunks, itl_ms / 1000, burst), "127.0.0.1", port, backlog=4096
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) > 5:
        os.sched_setaffinity(0, {int(sys.argv[5])})
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])))
