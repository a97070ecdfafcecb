"""A TRUTH FIXTURE, not an LLM: an OpenAI-style streaming server with a prefix cache of known capacity, for tests
of session workloads whose right answers must be known exactly (a real engine's cache capacity, eviction order and
prefill time cannot be set on demand).

- **Tokens** are whitespace-separated words; a chat renders as ``<|role|>`` then the message's words (a tool
  call's name, id and arguments after its content), and a generation prompt ``<|assistant|>``; ``/tokenize``
  counts a text the same way. A reply is ``max_tokens`` words ``tok`` (always: ``ignore_eos`` or not).
- **The cache** holds ``capacity_blocks`` blocks of ``block`` tokens, each keyed by the hash of its tokens and of
  every block before it (as vLLM's prefix cache keys them). A request's ``cached_tokens`` is its leading run of
  cached whole blocks, its last token never among them (vLLM recomputes it); at the end of its prefill its prompt's
  whole blocks become the most recently used, at its end the blocks its reply completed too; past the capacity the
  least recently used block is evicted.
- **TTFT** is ``base_ms + per_token_ms * (prompt tokens - cached tokens)``, slept per request (no queue between
  requests), then a token every ``step_ms``.
- A prompt and reply past ``context`` tokens is refused with 400 and vLLM's words.
- ``GET /metrics``: ``vllm:prefix_cache_queries_total``, ``vllm:prefix_cache_hits_total``,
  ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc`` (cached blocks over capacity) and
  ``vllm:num_preemptions_total`` (0); ``GET /truth``: every request's prompt tokens, cached tokens and intended TTFT.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from servelab.testing.engine_sim import Writer, _chunk, _reply

REPLY_WORD = "tok"


def render(messages: list[dict[str, Any]], generation_prompt: bool = True) -> list[str]:
    """A chat as the fixture's tokens."""
    tokens: list[str] = []
    for m in messages:
        tokens.append(f"<|{m.get('role', '')}|>")
        tokens += str(m.get("content") or "").split()
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            tokens += [str(call.get("id")), str(function.get("name")), *str(function.get("arguments", "")).split()]
    return [*tokens, "<|assistant|>"] if generation_prompt else tokens


def block_keys(tokens: list[str], block: int) -> list[int]:
    """The chained key of each whole block of ``tokens``."""
    keys, parent = [], 0
    for start in range(0, len(tokens) - block + 1, block):
        parent = hash((parent, tuple(tokens[start : start + block])))
        keys.append(parent)
    return keys


@dataclass
class CacheSim:
    capacity_blocks: int = 1024
    block: int = 16
    base_ms: float = 2.0
    per_token_ms: float = 0.2
    step_ms: float = 1.0
    context: int = 8192
    cache: OrderedDict[int, None] = field(default_factory=OrderedDict)
    truth: list[dict[str, Any]] = field(default_factory=list)
    queries: int = 0
    hits: int = 0
    running: int = 0

    def lookup(self, tokens: list[str]) -> int:
        """Cached tokens of a prompt: its leading cached whole blocks, the last token excluded."""
        cached = 0
        for key in block_keys(tokens[:-1], self.block):
            if key not in self.cache:
                break
            cached += self.block
        return cached

    def keep(self, tokens: list[str]) -> None:
        """``tokens``' whole blocks become the most recently used; the least recently used go past capacity."""
        for key in block_keys(tokens, self.block):
            self.cache[key] = None
            self.cache.move_to_end(key)
        while len(self.cache) > self.capacity_blocks:
            self.cache.popitem(last=False)

    def metrics(self) -> bytes:
        lines = [
            f"vllm:prefix_cache_queries_total {self.queries}",
            f"vllm:prefix_cache_hits_total {self.hits}",
            f"vllm:num_requests_running {self.running}",
            "vllm:num_requests_waiting 0",
            f"vllm:kv_cache_usage_perc {len(self.cache) / self.capacity_blocks}",
            "vllm:num_preemptions_total 0",
        ]
        return ("\n".join(lines) + "\n").encode()

    async def handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                length = next((int(x.split(":")[1]) for x in head if x.lower().startswith("content-length:")), 0)
                body = json.loads(await reader.readexactly(length)) if length else {}
                await self._route(head[0].split(" ")[1], body, writer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _route(self, path: str, body: dict[str, Any], writer: Writer) -> None:
        if path.endswith("/metrics"):
            _reply(writer, self.metrics(), "text/plain")
        elif path.endswith("/truth"):
            _reply(writer, json.dumps(self.truth).encode())
        elif path.endswith("/v1/models"):
            model = {"id": "cache-sim", "object": "model", "max_model_len": self.context}
            _reply(writer, json.dumps({"object": "list", "data": [model]}).encode())
        elif path.endswith("/tokenize"):
            words = str(body.get("prompt", "")).split()
            _reply(writer, json.dumps({"count": len(words), "max_model_len": self.context}).encode())
        elif path.endswith("/chat/completions"):
            await self._chat(writer, body)
        else:
            _reply(writer, b'{"error": {"message": "not found"}}', status=b"404 Not Found")

    async def _chat(self, writer: Writer, body: dict[str, Any]) -> None:
        tokens, out = render(body.get("messages") or []), int(body.get("max_tokens") or 16)
        if len(tokens) + out > self.context:
            message = (
                f"This model's maximum context length is {self.context} tokens. However, you requested "
                f"{len(tokens) + out} tokens ({len(tokens)} in the messages, {out} in the completion)."
            )
            _reply(writer, json.dumps({"error": {"message": message}}).encode(), status=b"400 Bad Request")
            return
        cached = self.lookup(tokens)
        ttft_s = (self.base_ms + self.per_token_ms * (len(tokens) - cached)) / 1000
        self.queries, self.hits = self.queries + len(tokens), self.hits + cached
        self.truth.append({"prompt_tokens": len(tokens), "cached_tokens": cached, "ttft_s": ttft_s})
        self.running += 1
        try:
            await self._stream(writer, tokens, cached, out, ttft_s)
        finally:
            self.running -= 1

    async def _stream(self, writer: Writer, tokens: list[str], cached: int, out: int, ttft_s: float) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await asyncio.sleep(ttft_s)
        self.keep(tokens)
        for i in range(out):
            if i:
                await asyncio.sleep(self.step_ms / 1000)
            choice = {
                "index": 0,
                "delta": {"content": f"{REPLY_WORD} "},
                "finish_reason": "length" if i == out - 1 else None,
            }
            _chunk(writer, b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        self.keep(tokens + [REPLY_WORD] * out)
        usage = {"prompt_tokens": len(tokens), "completion_tokens": out, "total_tokens": len(tokens) + out,
                 "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip
        _chunk(writer, b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")


async def serve_cache_sim(sim: CacheSim, ready: asyncio.Future[int], port: int = 0) -> None:
    """Serve on loopback until cancelled; the bound port goes to ``ready``."""
    server = await asyncio.start_server(sim.handle, "127.0.0.1", port, backlog=1024)
    ready.set_result(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """``python -m servelab.testing.cache_sim [--capacity-blocks N] [--block B] [--base-ms MS] [--per-token-ms MS]
    [--step-ms MS] [--context N]``: prints its port."""
    import argparse

    parser = argparse.ArgumentParser(description="A truth fixture with a prefix cache of known capacity (not an LLM).")
    parser.add_argument("--capacity-blocks", type=int, default=1024)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--base-ms", type=float, default=2.0)
    parser.add_argument("--per-token-ms", type=float, default=0.2)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--context", type=int, default=8192)
    args = parser.parse_args(argv)
    sim = CacheSim(args.capacity_blocks, args.block, args.base_ms, args.per_token_ms, args.step_ms, args.context)

    async def run() -> None:
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve_cache_sim(sim, ready))
        print(await ready, flush=True)
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
