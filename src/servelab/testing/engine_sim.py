"""A FAKE engine, not an LLM: an OpenAI-style streaming server whose capacity is set by its arguments, with vLLM's
/metrics gauges, for tests about where a load's ceiling is (a real engine cannot be made to cap its token rate,
or to hold requests in its HTTP frontend, on demand).

- The **frontend** admits one request at a time and spends ``admit_ms`` on each before handing it to the engine
  (a single-process HTTP server tokenizing), so requests queue there when they come faster than it admits them;
  ``frontend_cpu_ms`` is CPU it burns per request on its event loop (a frontend that is out of CPU).
- The **engine** runs at most ``max_running`` requests; every ``step_ms`` each running request gets one token, so
  its token rate is capped at ``max_running / step_ms``; the rest wait in its queue.
- ``GET /metrics`` publishes ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc`` (running / max_running), ``vllm:generation_tokens_total`` and, on the engine's clock
  as vLLM keeps them, the sums of its inter-token times (``vllm:inter_token_latency_seconds_sum``, as tokens come),
  queue times and prefill times (``vllm:request_queue_time_seconds_sum``, ``..._prefill_time_...``, as requests
  end) as vLLM names them; with ``--publish-cpu`` also its own ``process_cpu_seconds_total`` (prometheus_client's
  process series, which vLLM's one API server publishes).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

Writer = asyncio.StreamWriter


@dataclass
class _Request:
    tokens: int
    out: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)  # a token's index; None: done
    queued_at: float = field(default_factory=time.perf_counter)
    scheduled_at: float = 0.0
    last_token_at: float = 0.0
    prefill_s: float = 0.0  # scheduled -> first token


@dataclass
class SimEngine:
    max_running: int = 4
    step_ms: float = 5.0
    admit_ms: float = 0.0
    frontend_cpu_ms: float = 0.0
    publish_cpu: bool = False  # its own process_cpu_seconds_total on /metrics, as vLLM's one API server does
    running: list[_Request] = field(default_factory=list)
    waiting: list[_Request] = field(default_factory=list)
    generated: int = 0
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("itl", "queue", "prefill"), 0.0))
    _admit: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def step_loop(self) -> None:
        while True:
            await asyncio.sleep(self.step_ms / 1000)
            now = time.perf_counter()
            while self.waiting and len(self.running) < self.max_running:
                self.running.append(self.waiting.pop(0))
                self.running[-1].scheduled_at = now
            for req in list(self.running):
                self._token(req, now)

    def _token(self, req: _Request, now: float) -> None:
        if req.last_token_at:
            self.sums["itl"] += now - req.last_token_at
        else:
            req.prefill_s = now - req.scheduled_at
        req.last_token_at = now
        req.tokens -= 1
        self.generated += 1
        req.out.put_nowait(req.tokens)
        if req.tokens <= 0:
            req.out.put_nowait(None)
            self.running.remove(req)
            self.sums["queue"] += req.scheduled_at - req.queued_at
            self.sums["prefill"] += req.prefill_s

    async def submit(self, tokens: int) -> _Request:
        async with self._admit:  # the frontend: one request at a time
            if self.admit_ms:
                await asyncio.sleep(self.admit_ms / 1000)
            busy_until = time.perf_counter() + self.frontend_cpu_ms / 1000
            while time.perf_counter() < busy_until:  # CPU on the loop itself, as a tokenizer's would be
                pass
        req = _Request(max(1, tokens))
        self.waiting.append(req)
        return req

    def metrics(self) -> bytes:
        lines = [
            f'vllm:num_requests_running{{engine="0"}} {len(self.running)}',
            f'vllm:num_requests_waiting{{engine="0"}} {len(self.waiting)}',
            f'vllm:kv_cache_usage_perc{{engine="0"}} {len(self.running) / self.max_running}',
            f'vllm:generation_tokens_total{{engine="0"}} {self.generated}',
            f'vllm:inter_token_latency_seconds_sum{{engine="0"}} {self.sums["itl"]}',
            f'vllm:request_queue_time_seconds_sum{{engine="0"}} {self.sums["queue"]}',
            f'vllm:request_prefill_time_seconds_sum{{engine="0"}} {self.sums["prefill"]}',
        ]
        if self.publish_cpu:
            lines.append(f"process_cpu_seconds_total {time.process_time()}")
        return ("\n".join(lines) + "\n").encode()

    async def handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                length = next((int(x.split(":")[1]) for x in head if x.lower().startswith("content-length:")), 0)
                body = json.loads(await reader.readexactly(length)) if length else {}
                path = head[0].split(" ")[1]
                if path.endswith("/metrics"):
                    _reply(writer, self.metrics(), "text/plain")
                elif path.endswith("/v1/models"):
                    _reply(writer, json.dumps({"object": "list", "data": [{"id": "sim", "object": "model"}]}).encode())
                elif path.endswith("/chat/completions"):
                    await self._stream(writer, int(body.get("max_tokens") or 16))
                else:
                    _reply(writer, b'{"error": {"message": "not found"}}', status=b"404 Not Found")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _stream(self, writer: Writer, tokens: int) -> None:
        req = await self.submit(tokens)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        sent = 0
        while (left := await req.out.get()) is not None:
            sent += 1
            delta = {"choices": [{"index": 0, "delta": {"content": "x "}, "finish_reason": None}]}
            if left == 0:
                delta["choices"][0]["finish_reason"] = "length"
            _chunk(writer, b"data: " + json.dumps(delta).encode() + b"\n\n")
        usage = {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": sent, "total_tokens": sent + 8}}
        _chunk(writer, b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")


def _chunk(writer: Writer, payload: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))


def _reply(writer: Writer, body: bytes, kind: str = "application/json", status: bytes = b"200 OK") -> None:
    writer.write(
        b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (status, kind.encode(), len(body), body)
    )


async def serve_sim(engine: SimEngine, ready: asyncio.Future[int], port: int = 0) -> None:
    """Serve on loopback until cancelled; the bound port goes to ``ready``."""
    stepping = asyncio.create_task(engine.step_loop())
    server = await asyncio.start_server(engine.handle, "127.0.0.1", port, backlog=1024)
    ready.set_result(server.sockets[0].getsockname()[1])
    try:
        async with server:
            await server.serve_forever()
    finally:
        stepping.cancel()


def main(argv: list[str] | None = None) -> None:
    """``python -m servelab.testing.engine_sim [--max-running N] [--step-ms MS] [--admit-ms MS] [--frontend-cpu-ms
    MS] [--publish-cpu]``: prints its port."""
    import argparse

    parser = argparse.ArgumentParser(description="A fake engine with a capped token rate (not an LLM).")
    parser.add_argument("--max-running", type=int, default=4)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--admit-ms", type=float, default=0.0)
    parser.add_argument("--frontend-cpu-ms", type=float, default=0.0)
    parser.add_argument("--publish-cpu", action="store_true")
    args = parser.parse_args(argv)

    async def run() -> None:
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            serve_sim(
                SimEngine(args.max_running, args.step_ms, args.admit_ms, args.frontend_cpu_ms, args.publish_cpu), ready
            )
        )
        print(await ready, flush=True)
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
