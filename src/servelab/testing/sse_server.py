"""A FAKE OpenAI-style SSE server, not an LLM: it streams on a schedule it controls, for tests and benchmarks about
a timing, a fault or the load generator itself, which a real engine cannot produce on demand (chunk times known to
the microsecond, a mid-stream disconnect, malformed SSE, HTTP errors, a stalled stream, an event split across TCP
writes, a sink that answers as fast as a socket can).

The first path segment picks the behaviour: ``http://127.0.0.1:PORT/<mode>``, a mode of :data:`MODES`
(``schedule``, ``slow``, ``disconnect``, ``malformed``, ``http500``, ``http429``, ``stall``, ``split``, ``no_done``,
``inband_error``, ``aborted``, ``endless``, ``endless_event``, ``endless_error``, ``tools``, ``reasoning``,
``sink``); any other path gets the server's default mode.
``GET .../v1/models`` lists one model.

``schedule``: each content delta is "SENT:PREV ", SENT the server's ``perf_counter_ns()`` just before this chunk's
write and PREV the one just after the previous chunk's (0 for the first), so a test can compare its arrival
stamps with the send times and drop the chunks whose write the server was preempted in. Body fields:
``max_tokens`` (chunks), ``fixture_ttft_ms``, ``fixture_itl_ms``.

``sink`` (the load generator's benchmark): ``burst`` chunks every ``itl_ms`` (:class:`SinkShape`), each chunk's
content the server's ``perf_counter_ns()`` before the write; the first is ``RECV:SENT``, RECV when the whole
request had been read, so a client's TTFT splits into its own lead and the server's.

    python -m servelab.testing.sse_server [PORT] [--sink CHUNKS ITL_MS BURST] [--cpu N] [--reuse-port]  # its port
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass
from typing import Any

Writer = asyncio.StreamWriter


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {
        "id": "fx",
        "object": "chat.completion.chunk",
        "model": "fixture",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def _head(writer: Writer, status: int = 200, content_type: str = "text/event-stream", keep: bool = False) -> None:
    reason = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "X")
    close = "" if keep else "connection: close\r\n"
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n"
    writer.write(f"{head}{close}\r\n".encode())
    await writer.drain()


async def _send(writer: Writer, payload: bytes) -> None:
    writer.write(_http_chunk(payload))
    await writer.drain()


async def _end(writer: Writer) -> None:
    writer.write(b"0\r\n\r\n")
    await writer.drain()


USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}


async def mode_schedule(writer: Writer, req: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    n = int(req.get("max_tokens", 16))
    ttft, itl = float(req.get("fixture_ttft_ms", 20)) / 1e3, float(req.get("fixture_itl_ms", 20)) / 1e3
    await _head(writer, keep=bool(req.get("_keep")))
    after = 0
    for i in range(n):
        await asyncio.sleep(max(0.0, start + ttft + i * itl - loop.time()))
        writer.write(_http_chunk(_chunk({"content": f"{time.perf_counter_ns()}:{after} "})))
        after = time.perf_counter_ns()
    usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}
    writer.write(
        _http_chunk(
            _chunk({}, "length")
            + b"data: "
            + json.dumps({"id": "fx", "choices": [], "usage": usage}).encode()
            + b"\n\ndata: [DONE]\n\n"
        )
    )
    await _end(writer)


async def mode_slow(writer: Writer, req: dict[str, Any]) -> None:
    """``schedule`` with its first chunk after 3 s (a held prefill) whatever the body asks: for a proxy that
    forwards only bodies it can count, which a fixture's own body fields are not."""
    await mode_schedule(writer, {**req, "fixture_ttft_ms": 3000})


async def mode_disconnect(writer: Writer, req: dict[str, Any]) -> None:
    await _head(writer)
    for word in ("one ", "two ", "three "):
        await _send(writer, _chunk({"content": word}))
    writer.transport.abort()  # no terminating chunk, no [DONE]


async def mode_malformed(writer: Writer, req: dict[str, Any]) -> None:
    await _head(writer)
    await _send(writer, _chunk({"content": "ok "}))
    await _send(writer, b"data: {not json at all\n\n")
    await _end(writer)


async def _error_status(writer: Writer, status: int) -> None:
    body = json.dumps({"error": {"message": f"fixture status {status}", "code": status}}).encode()
    reason = "Too Many Requests" if status == 429 else "Internal Server Error"
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def mode_http500(writer: Writer, req: dict[str, Any]) -> None:
    await _error_status(writer, 500)


async def mode_http429(writer: Writer, req: dict[str, Any]) -> None:
    await _error_status(writer, 429)


async def mode_stall(writer: Writer, req: dict[str, Any]) -> None:
    await _head(writer)
    await _send(writer, _chunk({"content": "first "}))
    await asyncio.sleep(3600)


async def mode_split(writer: Writer, req: dict[str, Any]) -> None:
    """One event written a few bytes at a time, 30 ms apart, then a normal end."""
    await _head(writer)
    event = _chunk({"content": "split-event"})
    for i in range(0, len(event), 7):
        await _send(writer, event[i : i + 7])
        await asyncio.sleep(0.03)
    await _send(writer, _chunk({}, "stop") + b"data: [DONE]\n\n")
    await _end(writer)


async def mode_no_done(writer: Writer, req: dict[str, Any]) -> None:
    await _head(writer)
    await _send(writer, _chunk({"content": "cut "}))
    await _end(writer)


async def mode_inband_error(writer: Writer, req: dict[str, Any]) -> None:
    await _head(writer)
    await _send(writer, _chunk({"content": "partial "}))
    await _send(writer, b'data: {"error": {"message": "engine overloaded", "code": 503}}\n\n')
    await _end(writer)


async def mode_aborted(writer: Writer, req: dict[str, Any]) -> None:
    """What vLLM sends for a request it aborts at shutdown: a finish_reason of "abort", usage, then [DONE]."""
    await _head(writer)
    await _send(writer, _chunk({"content": "half "}))
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    tail = json.dumps({"id": "fx", "choices": [], "usage": usage}).encode()
    await _send(writer, _chunk({}, "abort") + b"data: " + tail + b"\n\ndata: [DONE]\n\n")
    await _end(writer)


async def mode_endless(writer: Writer, req: dict[str, Any]) -> None:
    """A server that ignores max_tokens: content chunks until the client hangs up."""
    await _head(writer)
    while not writer.is_closing():
        await _send(writer, _chunk({"content": "more "}) * 64)


async def mode_endless_event(writer: Writer, req: dict[str, Any]) -> None:
    """One event that never ends: a data line written 64 KiB at a time, no line end, until the client hangs up."""
    await _head(writer)
    await _send(writer, b"data: ")
    while not writer.is_closing():
        await _send(writer, b"x" * 65536)


async def mode_endless_error(writer: Writer, req: dict[str, Any]) -> None:
    """An HTTP 500 whose body never ends."""
    await _head(writer, 500, "text/plain")
    await _send(writer, b"engine failed: ")
    while not writer.is_closing():
        await _send(writer, b"y" * 65536)


async def mode_tools(writer: Writer, req: dict[str, Any]) -> None:
    await _head(writer)
    calls = [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"city": '}},
        {"index": 0, "function": {"arguments": '"Paris"}'}},
    ]
    for call in calls:
        await _send(writer, _chunk({"tool_calls": [call]}))
    await _send(
        writer,
        _chunk({}, "tool_calls")
        + b"data: "
        + json.dumps({"id": "fx", "choices": [], "usage": USAGE}).encode()
        + b"\n\ndata: [DONE]\n\n",
    )
    await _end(writer)


async def mode_reasoning(writer: Writer, req: dict[str, Any]) -> None:
    await _head(writer)
    await _send(writer, _chunk({"role": "assistant"}))
    await asyncio.sleep(0.02)
    await _send(writer, _chunk({"reasoning_content": "think "}))
    await asyncio.sleep(0.02)
    await _send(writer, _chunk({"reasoning": "more "}))
    await asyncio.sleep(0.02)
    await _send(writer, _chunk({"content": "answer"}))
    await _send(writer, _chunk({}, "stop", timings={"predicted_per_second": 42.0}) + b"data: [DONE]\n\n")
    await _end(writer)


@dataclass(frozen=True, slots=True)
class SinkShape:
    chunks: int = 8  # per stream, unless the request's max_tokens says otherwise
    itl_ms: float = 20.0
    burst: int = 1  # chunks per write


async def mode_sink(writer: Writer, req: dict[str, Any]) -> None:
    shape: SinkShape = req["_sink"]
    loop = asyncio.get_running_loop()
    chunks, itl, start = int(req.get("max_tokens") or shape.chunks), shape.itl_ms / 1000, loop.time()
    await _head(writer)
    sent = tick = 0
    while sent < chunks:
        await asyncio.sleep(max(0.0, start + tick * itl - loop.time()))
        n = min(shape.burst, chunks - sent)
        head = f"{req['_recv_ns']}:" if sent == 0 else ""
        contents = (f"{head if i == 0 else ''}{time.perf_counter_ns()} " for i in range(n))
        writer.write(_http_chunk(b"".join(_chunk({"content": c}) for c in contents)))
        sent, tick = sent + n, tick + 1
    usage = {"prompt_tokens": 8, "completion_tokens": chunks, "total_tokens": chunks + 8}
    tail = json.dumps({"id": "s", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "usage": usage})
    writer.write(_http_chunk(b"data: " + tail.encode() + b"\n\ndata: [DONE]\n\n"))
    await _end(writer)


async def _models(writer: Writer, model: str) -> None:
    body = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()


MODES = {name.removeprefix("mode_"): fn for name, fn in globals().items() if name.startswith("mode_")}


@dataclass(frozen=True, slots=True)
class FakeServer:
    """What every connection is answered with: the mode of a path with none, the sink's shape, the model's name."""

    default: str = "http500"
    sink: SinkShape = SinkShape()
    model: str = "fixture"

    async def handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        """One request per connection, except ``schedule`` streams, which keep the connection open for the next
        request (as an engine does) unless the client sent ``connection: close``."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next((int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length:")), 0)
                req = json.loads(await reader.readexactly(length)) if length else {}
                if lines[0].startswith("GET ") and path.endswith("/v1/models"):
                    await _models(writer, self.model)
                    return
                mode = path.strip("/").split("/")[0]
                mode = mode if mode in MODES else self.default
                req.update(_sink=self.sink, _recv_ns=time.perf_counter_ns())
                req["_keep"] = mode == "schedule" and not any(x.lower() == "connection: close" for x in lines)
                await MODES[mode](writer, req)
                if not req["_keep"]:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def serve(
    port: int = 0,
    ready: asyncio.Future[int] | None = None,
    server: FakeServer | None = None,
    backlog: int = 512,
    reuse_port: bool = False,
) -> None:
    """Serve on loopback until cancelled; the bound port goes to ``ready``, or is printed. With ``reuse_port``
    several processes serve one port (the kernel spreads the connections)."""
    fake = server or FakeServer()
    listening = await asyncio.start_server(
        fake.handle, "127.0.0.1", port, backlog=backlog, reuse_port=reuse_port or None
    )
    bound = listening.sockets[0].getsockname()[1]
    if ready is not None:
        ready.set_result(bound)
    else:
        print(bound, flush=True)
    async with listening:
        await listening.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake OpenAI-style SSE server (not an LLM).")
    parser.add_argument("port", type=int, nargs="?", default=0)
    parser.add_argument("--sink", nargs=3, metavar=("CHUNKS", "ITL_MS", "BURST"), help="answer every path as a sink")
    parser.add_argument("--cpu", type=int, help="pin the server to this CPU")
    parser.add_argument("--reuse-port", action="store_true", help="share the port with other processes")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    fake = FakeServer()
    if args.sink:
        chunks, itl_ms, burst = args.sink
        fake = FakeServer("sink", SinkShape(int(chunks), float(itl_ms), int(burst)), "sink")
    asyncio.run(serve(args.port, server=fake, backlog=4096 if args.sink else 512, reuse_port=args.reuse_port))


if __name__ == "__main__":
    main()
