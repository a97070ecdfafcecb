"""Against llama.cpp's own llama-server (the C++ server, built from the llama-cpp-python sdist) on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from servelab.bench.metrics import engine_values, figure
from servelab.core.summary import summarize
from servelab.engines.client import StreamClient
from servelab.engines.embedded import MODEL_NAME, EngineState
from servelab.load.targets import TargetSpec, resolve

MESSAGES = [{"role": "user", "content": "Name three colours."}]


def chat(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0, **extra}


def test_a_streamed_record_with_the_servers_own_timings(llamacpp_engine: EngineState) -> None:
    record = asyncio.run(StreamClient(llamacpp_engine.url).send("chat", chat(24, ignore_eos=True)))
    assert record.error is None, record.error_detail
    assert record.completion_tokens == 24 and record.finish_reason == "length"
    assert record.server_timings is not None  # llama.cpp's own view: prompt and predicted ms, tokens/s
    assert record.server_timings["predicted_n"] == 24
    assert record.server_timings["prompt_n"] + record.server_timings.get("cache_n", 0) == record.prompt_tokens
    assert record.sent_ns <= record.headers_ns <= record.first_token_ns < record.end_ns  # type: ignore[operator]


def test_parallel_slots_overlap(llamacpp_engine: EngineState) -> None:
    client = StreamClient(llamacpp_engine.url)

    async def go() -> list[Any]:
        return list(await asyncio.gather(*(client.send("chat", chat(16, ignore_eos=True)) for _ in range(4))))

    records = asyncio.run(go())
    assert all(r.error is None for r in records), [r.error_detail for r in records]
    summary = summarize(records)
    assert summary.ok == 4 and summary.output_tokens == 64
    assert summary.active_window_s < sum((r.end_ns - r.sent_ns) for r in records) / 1e9  # type: ignore[operator]


def test_the_target_knows_a_slots_context(llamacpp_engine: EngineState) -> None:
    """llama.cpp states no max_model_len in /v1/models; /props has what one slot holds (-c 32768 over 4 slots)."""
    target = resolve(TargetSpec("llamacpp", llamacpp_engine.url))
    assert target.model == MODEL_NAME and target.max_model_len == 8192


def test_metrics_and_slots(llamacpp_engine: EngineState) -> None:
    asyncio.run(StreamClient(llamacpp_engine.url).send("chat", chat(8)))
    text = httpx.get(llamacpp_engine.url + "/metrics", timeout=10).text
    assert "llamacpp:tokens_predicted_total" in text
    values = engine_values(text)
    assert (figure(values, "generation_tokens") or 0) >= 8 and figure(values, "running") is not None
    slots = httpx.get(llamacpp_engine.url + "/slots", timeout=10).json()
    assert isinstance(slots, list) and len(slots) == 4 and all("n_ctx" in slot for slot in slots)


def test_a_repeated_prompt_is_served_from_its_cache(llamacpp_engine: EngineState) -> None:
    long = [{"role": "user", "content": "Summarise: " + "the quick brown fox jumps over the lazy dog. " * 30}]
    client = StreamClient(llamacpp_engine.url)
    body = {"model": MODEL_NAME, "messages": long, "max_tokens": 4, "temperature": 0, "cache_prompt": True,
            "id_slot": 0}  # fmt: skip
    cold = asyncio.run(client.send("chat", dict(body)))
    warm = asyncio.run(client.send("chat", dict(body)))
    assert cold.error is None and warm.error is None
    assert warm.server_timings is not None and cold.server_timings is not None
    assert warm.server_timings.get("cache_n", 0) > cold.server_timings.get("cache_n", 0)
    assert warm.server_timings["prompt_n"] < cold.server_timings["prompt_n"]


def test_a_bad_request_is_a_recorded_client_error(llamacpp_engine: EngineState) -> None:
    record = asyncio.run(StreamClient(llamacpp_engine.url).send("chat", {"model": MODEL_NAME, "messages": "nope"}))
    assert record.error is not None and record.http_status is not None and 400 <= record.http_status < 500
