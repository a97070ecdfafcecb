"""Against the real embedded vLLM engine on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from servelab.core.summary import summarize
from servelab.engines.client import StreamClient
from servelab.engines.embedded import MODEL_NAME, EmbeddedEngine, EngineState

MESSAGES = [{"role": "user", "content": "Name three colours."}]


def chat(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "messages": MESSAGES,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        **extra,
    }


def test_streamed_record_matches_server_usage(engine: EngineState) -> None:
    record = asyncio.run(StreamClient(engine.url).send("chat", chat(24)))
    assert record.error is None, record.error_detail
    assert record.completion_tokens == 24 and record.finish_reason == "length"
    tokenized = httpx.post(engine.url + "/tokenize", json={"model": MODEL_NAME, "messages": MESSAGES}).json()
    assert record.prompt_tokens == tokenized["count"]
    # vLLM streams one token per chunk here; the client's count is the cross-check
    assert abs(record.client_token_count - record.completion_tokens) <= 1
    assert len(record.chunk_ns) == record.client_token_count
    assert record.sent_ns <= record.headers_ns <= record.first_token_ns < record.end_ns  # type: ignore[operator]


def test_completions_endpoint(engine: EngineState) -> None:
    payload = {"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    record = asyncio.run(StreamClient(engine.url).send("completions", payload))
    assert record.error is None, record.error_detail
    assert record.completion_tokens == 8 and record.output_text.strip()
    assert record.first_content_ns == record.first_token_ns


def test_four_concurrent_streams(engine: EngineState) -> None:
    client = StreamClient(engine.url)

    async def go() -> list[Any]:
        return list(await asyncio.gather(*(client.send("chat", chat(32)) for _ in range(4))))

    records = asyncio.run(go())
    assert all(r.error is None for r in records), [r.error_detail for r in records]
    summary = summarize(records)
    assert summary.ok == 4 and summary.output_tokens == 128
    # the four streams overlapped: the active window is shorter than their sum
    assert summary.active_window_s < sum((r.end_ns - r.sent_ns) for r in records) / 1e9  # type: ignore[operator]


def test_bad_request_is_a_4xx_record(engine: EngineState) -> None:
    record = asyncio.run(StreamClient(engine.url).send("chat", {**chat(8), "model": "no-such-model"}))
    assert record.http_status == 404 or record.error is not None
    assert record.error is not None and record.error.value == "http_4xx"


def test_second_up_reuses_the_running_engine(engine: EngineState, engine_handle: EmbeddedEngine) -> None:
    again = engine_handle.up()
    assert again.reused and again.pid == engine.pid
