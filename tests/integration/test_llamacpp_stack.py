"""servelab's own layers against llama.cpp's llama-server on loopback: native tool calls, eval grading, the
gateway relaying it (and stopping it when a client leaves) and coexist load beside it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from servelab.bench import Load, expand, resolve_targets, run_bench
from servelab.bench.metrics import engine_values, figure
from servelab.coexist import CoexistOptions, LlmLoad, run_coexist
from servelab.coexist.probes import WorkerProbe, WorkerSpec
from servelab.core.store import RunStore
from servelab.core.summary import ttft_ms
from servelab.engines.client import ClientOptions, StreamClient
from servelab.engines.embedded import MODEL_NAME, EngineState
from servelab.eval import EvalOptions, load_items, run_eval
from servelab.eval.grade import Outcome
from servelab.eval.needle import needle_item
from servelab.gateway import running
from servelab.gateway.config import GatewayConfig, Keys, Policy, Upstream
from servelab.load.runner import cache_reached_unique_part

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _call(city: str, call_id: str) -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}  # fmt: skip


def tool_chat(**extra: Any) -> dict[str, Any]:
    """Two earlier calls in the history: SmolLM2-135M then answers the third city with a call of its own."""
    history = [{"role": "user", "content": "Rome"}, _call("Rome", "c1"), {"role": "user", "content": "Oslo"},
               _call("Oslo", "c2"), {"role": "user", "content": "Paris"}]  # fmt: skip
    return {"model": MODEL_NAME, "messages": history, "tools": [WEATHER], "max_tokens": 40, "temperature": 0, **extra}


def tokens_predicted(url: str) -> float:
    return figure(engine_values(httpx.get(url + "/metrics", timeout=10).text), "generation_tokens") or 0.0


def slots_idle(url: str, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(s.get("is_processing") for s in httpx.get(url + "/slots", timeout=10).json()):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_native_tool_calls_streamed_and_assembled(llamacpp_engine: EngineState, choice: str) -> None:
    record = asyncio.run(StreamClient(llamacpp_engine.url).send("chat", tool_chat(tool_choice=choice)))
    assert record.ok, record.error_detail
    assert record.finish_reason == "tool_calls"
    assert record.tool_calls and record.tool_calls[0]["function"]["name"] == "get_weather"
    assert json.loads(record.tool_calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_eval_suites_are_graded_against_llama_server(llamacpp_engine: EngineState, tmp_path: Path) -> None:
    """Every item gets one outcome, none an error; the tools reach the prompt (the template renders them)."""
    store = RunStore(tmp_path / "runs.sqlite")
    targets = resolve_targets([("llamacpp", llamacpp_engine.url)])
    items = [*load_items(["quick", "tools"]), needle_item(1500, 0.5)]
    result = run_eval(store, targets, items, EvalOptions(concurrency=4))
    replies = result.replies["llamacpp"]
    assert sorted(g.item.id for g in replies) == sorted(i.id for i in items)
    assert not [g for g in replies if g.grade.outcome is Outcome.ERROR], [g.grade.detail for g in replies]
    tools = [g for g in replies if g.item.kind == "tool"]
    plain = [g for g in replies if g.item.kind != "tool" and g.item.kind != "needle"]
    assert min(g.record.prompt_tokens or 0 for g in tools) > 150 > max(g.record.prompt_tokens or 0 for g in plain)
    needle = next(g for g in replies if g.item.kind == "needle")
    assert needle.record.prompt_tokens and abs(needle.record.prompt_tokens - 1500) < 0.05 * 1500


def _gateway(local: str) -> GatewayConfig:
    return GatewayConfig(local=Upstream(url=local, connect_timeout_s=2), external=None,
                         policy=Policy(prefill_threshold_tokens=8000, health_interval_s=0.2),
                         keys=Keys(admin=["admin-key"]), port=0)  # fmt: skip


def test_the_gateway_relays_llama_server(llamacpp_engine: EngineState) -> None:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 16,
            "temperature": 0}  # fmt: skip
    with running(_gateway(llamacpp_engine.url)) as (url, _):
        client = StreamClient(url, options=ClientOptions(include_usage=True))
        relayed = asyncio.run(client.send("chat", dict(body)))
        direct = asyncio.run(StreamClient(llamacpp_engine.url).send("chat", dict(body)))
        tool = asyncio.run(client.send("chat", tool_chat(tool_choice="required")))
        models = httpx.get(url + "/v1/models", timeout=10).json()
    assert relayed.ok and relayed.output_text == direct.output_text
    assert relayed.completion_tokens == direct.completion_tokens and relayed.server_timings is not None
    assert tool.ok and tool.tool_calls and tool.finish_reason == "tool_calls"
    assert models["data"][0]["id"] == MODEL_NAME


def test_a_client_leaving_the_gateway_stops_llama_server(llamacpp_engine: EngineState) -> None:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Tell a story."}], "max_tokens": 2000,
            "ignore_eos": True, "stream": True}  # fmt: skip
    assert slots_idle(llamacpp_engine.url)
    before = tokens_predicted(llamacpp_engine.url)
    with running(_gateway(llamacpp_engine.url)) as (url, _):
        with (
            httpx.Client(base_url=url, timeout=60) as http,
            http.stream("POST", "/v1/chat/completions", json=body) as r,
        ):
            for _ in r.iter_bytes():
                break  # one chunk, then hang up
        assert slots_idle(llamacpp_engine.url), "llama-server kept generating for a client that had left"
    assert tokens_predicted(llamacpp_engine.url) - before < 2000


@pytest.mark.integration
def test_coexist_load_beside_llama_server(llamacpp_engine: EngineState, tmp_path: Path) -> None:
    """llama.cpp prefills ~120 tokens/s on this 2-core box (2,030 tokens took 16.7 s): 400-token prompts and
    8-s conditions let each kind of request finish beside the probe."""
    target = resolve_targets([("llamacpp", llamacpp_engine.url)])[0]
    probe = WorkerProbe(WorkerSpec("cpu", "voice", dim=256, layers=4, ffn=768, chunks=20, period_ms=2000))
    options = CoexistOptions(repeats=1, utterances=4, load=LlmLoad(decode_streams=2, decode_tokens=16,
                             prefill_tokens=400), settle_s=3.0, sharing={"mode": "time-sliced"},
                             llm_baselines=False)  # fmt: skip
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_coexist(db, probe, target, options)
        records = db.records(result.run_id)
    assert result.failed is None, result.failed
    assert [c.condition for c in result.conditions] == ["alone", "decode", "prefill", "both"]
    assert all(c.utterances == 4 and c.chunks == 80 for c in result.conditions)
    assert any(r.ok for r in records if r.scenario == "llm-decode@decode")
    assert all(r.ok or r.error == "cancelled" for r in records), [r.error_detail for r in records if r.error]
    prefill = [r for r in records if r.scenario.startswith("llm-prefill") and r.ok]
    assert prefill and all(r.prompt_tokens and 390 <= r.prompt_tokens <= 440 for r in prefill)
    # each prompt's unique head keeps llama.cpp's slot cache to the template's shared system turn
    assert not [r for r in prefill if cache_reached_unique_part(r)], [
        (r.cached_tokens, r.prompt_tokens) for r in prefill
    ]
    assert all(r.server_timings is not None for r in prefill)  # llama.cpp's own view kept beside the client's


def test_bench_streams_and_the_servers_own_series(llamacpp_engine: EngineState, tmp_path: Path) -> None:
    targets = resolve_targets([("llamacpp", llamacpp_engine.url)])
    with RunStore(tmp_path / "runs.sqlite") as store:
        result = run_bench(store, targets, expand(["concurrent-4"]), Load(requests=4, max_tokens=24),
                           scrape_interval=0.2)  # fmt: skip
    records = [r for r in result.records if r.scenario == "concurrent-4"]
    assert len(records) == 4 and all(r.ok and r.completion_tokens == 24 for r in records)
    assert all(r.server_timings and r.server_timings["predicted_n"] == 24 for r in records)
    derived = result.metrics["llamacpp"]  # from its llamacpp: series, scraped while the four streams ran
    assert isinstance(derived["samples"], int) and derived["samples"] >= 3
    assert isinstance(derived["running_max"], float | int) and derived["running_max"] >= 2  # requests_processing


def test_bench_cold_then_warm_prefix_on_llama_servers_slot_cache(llamacpp_engine: EngineState, tmp_path: Path) -> None:
    """llama.cpp reuses a slot's common prefix token by token (no blocks): the warm request finds the whole
    shared prefix cached and skips its prefill."""
    targets = resolve_targets([("llamacpp", llamacpp_engine.url)])
    with RunStore(tmp_path / "runs.sqlite") as store:
        load = Load(requests=1, max_tokens=4, prefix_tokens=600, warmup=0)
        result = run_bench(store, targets, expand(["prefix-long"]), load, scrape_interval=0.2)
    (cold,) = [r for r in result.records if r.scenario == "prefix-long:cold"]
    (warm,) = [r for r in result.records if r.scenario == "prefix-long:warm"]
    assert cold.ok and warm.ok and cold.prompt_tokens == warm.prompt_tokens
    assert cold.prompt_tokens and 580 <= cold.prompt_tokens <= 700
    assert not cache_reached_unique_part(cold)
    assert warm.cached_tokens is not None and warm.cached_tokens >= 580
    assert ttft_ms(warm) < ttft_ms(cold)  # type: ignore[operator]
    assert not [w for w in result.warnings if "prefix cache" in w], result.warnings


def test_the_gateway_counts_a_chat_with_llama_servers_own_tokenizer(llamacpp_engine: EngineState) -> None:
    """llama-server's /tokenize takes text only (a chat gets an empty list back, which is not 0 tokens): the
    gateway renders the chat with its /apply-template first, so the count is the prompt llama.cpp will see."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x1 " * 270}], "max_tokens": 1}
    cfg = _gateway(llamacpp_engine.url)
    cfg.policy.prefill_threshold_tokens = 200  # over it by the byte bound: counted exactly by the engine
    direct = asyncio.run(StreamClient(llamacpp_engine.url).send("chat", dict(body)))
    with running(cfg) as (url, _):
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    tokens, method = reply.headers["x-servelab-tokens"].split(";")
    assert method == "engine" and direct.prompt_tokens is not None
    assert direct.prompt_tokens <= int(tokens) <= direct.prompt_tokens + 2  # the same template, the same tokenizer
