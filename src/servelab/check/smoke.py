"""The smoke run `servelab check` does until the full check lands: streamed requests, real figures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.core.manifest import build_manifest
from servelab.core.records import RequestRecord
from servelab.core.store import STATUS_COMPLETE, STATUS_FAILED, RunStore
from servelab.core.summary import Summary, summarize
from servelab.engines.client import ClientOptions, StreamClient, discover_model

SMOKE_PROMPTS = (
    "Write a short Python function that checks whether a number is prime, then explain it.",
    "Describe a quiet morning in a mountain village in a few sentences.",
    "List five tips for writing clear commit messages.",
    "Explain what a KV cache is in a language model server.",
)


@dataclass(frozen=True, slots=True)
class SmokeResult:
    run_id: str
    model: str
    levels: dict[int, Summary]
    records: list[RequestRecord]


def _payload(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,  # vLLM extension: fixed output length, so tok/s compares like with like
    }


async def _level(
    client: StreamClient, model: str, streams: int, max_tokens: int, sink: Callable[[RequestRecord], None]
) -> list[RequestRecord]:
    async def one(i: int) -> RequestRecord:
        record = client.new_record("chat", scenario=f"smoke-x{streams}")
        prompt = SMOKE_PROMPTS[i % len(SMOKE_PROMPTS)]
        await client.send("chat", _payload(model, prompt, max_tokens), record=record)
        sink(record)
        return record

    return list(await asyncio.gather(*(one(i) for i in range(streams))))


def run_smoke(
    store: RunStore,
    url: str,
    *,
    target_name: str = "embedded",
    levels: Sequence[int] = (1, 4),
    max_tokens: int = 128,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> SmokeResult:
    """Stream one request, then ``levels`` concurrent ones; store every record as it finishes."""
    model = discover_model(url)
    manifest = build_manifest("check-smoke", {"levels": list(levels), "max_tokens": max_tokens}, {target_name: url})
    run_id = store.create_run("check-smoke", manifest)
    client = StreamClient(url, target=target_name, options=ClientOptions(read_timeout=120))

    def sink(record: RequestRecord) -> None:
        store.add_record(run_id, record)
        if on_record:
            on_record(record)

    summaries: dict[int, Summary] = {}
    records: list[RequestRecord] = []
    status = STATUS_FAILED
    try:
        asyncio.run(_level(client, model, 1, 8, lambda r: None))  # warm-up, not stored
        for streams in levels:
            level_records = asyncio.run(_level(client, model, streams, max_tokens, sink))
            records.extend(level_records)
            summaries[streams] = summarize(level_records)
            store.put_summary(run_id, f"x{streams}", summaries[streams].to_dict())
        status = STATUS_COMPLETE
    finally:
        store.finish_run(run_id, status)
    return SmokeResult(run_id, model, summaries, records)
