"""servelab gateway between two real servers: the embedded engine as local, a second embedded vLLM (with an API
key) as the external API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from servelab.engines.client import ClientOptions, StreamClient
from servelab.engines.embedded import EngineState
from servelab.gateway import Gateway, running
from servelab.gateway.config import GatewayConfig, Keys, Policy, Upstream
from servelab.testing import free_port
from tests.fixtures.hostile_peers import tokenizer_folder
from tests.integration.conftest import EXTERNAL_KEY_ENV

ADMIN = {"Authorization": "Bearer admin-key"}
WAIT_S = 120.0  # a reply may wait on a prefill of two engines sharing this machine's 2 cores: routing is tested here
CHAT = {
    "model": "smollm2-135m-instruct",
    "messages": [{"role": "user", "content": "Count to five."}],
    "max_tokens": 16,
    "temperature": 0.0,
}


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@contextmanager
def serve(config: GatewayConfig) -> Iterator[tuple[str, Gateway]]:
    with running(config.model_copy(update={"port": 0})) as (url, gateway):
        yield url, gateway


def _client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=WAIT_S)


def config(local: str, external: str | None, key_env: str = EXTERNAL_KEY_ENV, **policy: float) -> GatewayConfig:
    return GatewayConfig(
        local=Upstream(url=local, connect_timeout_s=2, tokenizer=tokenizer_folder()),  # the engine's folder
        external=Upstream(url=external, connect_timeout_s=2, api_key_env=key_env) if external else None,
        policy=Policy(
            prefill_threshold_tokens=int(policy.pop("threshold", 8000)),
            health_interval_s=policy.pop("health_interval_s", 0.2),
            **policy,
        ),
        keys=Keys(admin=["admin-key"]),
    )


def stream(url: str, *, usage: bool = True, body: dict | None = None):  # type: ignore[no-untyped-def]
    client = StreamClient(url, options=ClientOptions(include_usage=usage))
    return asyncio.run(client.send("chat", dict(body or CHAT, ignore_eos=True, max_tokens=16)))


def test_streams_chunk_by_chunk_with_route_headers_and_usage_only_when_asked(
    engine: EngineState, external_engine: EngineState
) -> None:
    with serve(config(engine.url, external_engine.url)) as (url, _):
        record, direct = stream(url), stream(engine.url)
        assert record.ok and direct.ok, record.error_detail
        assert record.output_text == direct.output_text  # temperature 0: the same text...
        # ...in as many chunks: passed on one by one (that each leaves before the next arrives upstream is timed
        # against the SSE fixture's known schedule: tests/unit/gateway/test_relay_timing.py)
        assert len(record.chunk_ns) == len(direct.chunk_ns) >= 8
        assert record.prompt_tokens is not None  # asked: the usage chunk came through
        quiet = stream(url, usage=False)
        assert quiet.ok and quiet.prompt_tokens is None and quiet.completion_tokens is None  # not asked: dropped
        with _client(url) as http:
            reply = http.post("/v1/chat/completions", json=CHAT)
            assert reply.headers["x-servelab-route"] == "local" and reply.headers["x-servelab-reason"] == "default"
            assert reply.json()["choices"][0]["message"]["content"]
            metrics = http.get("/metrics").text
        # the gateway asks the upstream for usage on every stream (dropping it where the client did not): all counted
        completion = record.completion_tokens + 16 + reply.json()["usage"]["completion_tokens"]
        assert metric(metrics, 'servelab_gateway_usage_tokens_total{kind="completion",route="local"}') == completion
        assert 'servelab_gateway_in_flight{route="local"} 0.0' in metrics


def test_maintenance_long_prefill_and_realtime_route_external(
    engine: EngineState, external_engine: EngineState
) -> None:
    with serve(config(engine.url, external_engine.url, threshold=200)) as (url, _), _client(url) as http:
        assert http.post("/admin/maintenance", json={"active": True}).status_code == 401
        assert http.post("/admin/maintenance", json={"active": True}, headers=ADMIN).json()["maintenance"]
        reply = http.post("/v1/chat/completions", json=CHAT)
        assert (reply.headers["x-servelab-route"], reply.headers["x-servelab-reason"]) == ("external", "maintenance")
        http.post("/admin/maintenance", json={"active": False}, headers=ADMIN)  # held: min hold time 5 s
        assert http.get("/admin/state", headers=ADMIN).json()["maintenance"]
    # over policy.bound_tokens_max (1,024) by its byte bound: counted exactly in process with the engine's own
    # tokenizer, and over the 200-token threshold by that count
    long_chat = dict(CHAT, messages=[{"role": "user", "content": "x1 " * 400}])
    relaxed = config(engine.url, external_engine.url, threshold=200, min_hold_s=0)
    with serve(relaxed) as (url, _), _client(url) as http:
        reply = http.post("/v1/chat/completions", json=long_chat)
        assert reply.headers["x-servelab-reason"] == "long_prefill" and reply.status_code == 200
        tokens, method = reply.headers["x-servelab-tokens"].split(";")
        assert method == "exact" and int(tokens) > 200
        http.post("/admin/realtime", json={"active": True, "ttl_s": 30}, headers=ADMIN)
        reply = http.post("/v1/chat/completions", json=long_chat)
        assert reply.headers["x-servelab-reason"] == "realtime_long_prefill"
        short = http.post("/v1/chat/completions", json=CHAT)
        assert short.headers["x-servelab-route"] == "local", (short.headers, short.text)
        assert short.headers["x-servelab-reason"] == "realtime_short"


def test_failover_before_the_first_byte_once_and_503_when_nothing_serves(
    engine: EngineState, external_engine: EngineState
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with serve(config(closed, external_engine.url)) as (url, gateway), _client(url) as http:
        reply = http.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 200
        assert (reply.headers["x-servelab-route"], reply.headers["x-servelab-reason"]) == (
            "external",
            "failover_from_local",
        )
        record, direct = stream(url), stream(engine.url)
        assert record.ok and record.output_text == direct.output_text  # no duplicated text: one upstream answered
        deadline = time.monotonic() + 5
        while gateway.health.healthy and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not gateway.health.healthy and "cannot connect" in gateway.health.last_error
        reply = http.post("/v1/chat/completions", json=CHAT)
        assert reply.headers["x-servelab-reason"] == "local_unhealthy"
    with serve(config(closed, f"http://127.0.0.1:{free_port()}")) as (url, _), _client(url) as http:
        reply = http.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 503 and reply.json()["error"]["type"] == "no_backend"
        assert reply.headers["retry-after"] == "5"
        assert http.get("/healthz").status_code == 200


def engine_metric(engine: EngineState, name: str) -> float:
    """A vLLM counter or gauge, summed over its label sets."""
    text = httpx.get(engine.url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def wait_idle(engine: EngineState, gateway_url: str, seconds: float = 20) -> bool:
    """The gateway's local in-flight gauge and vLLM's running requests both back to 0."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gauge = metric(httpx.get(gateway_url + "/metrics").text, 'servelab_gateway_in_flight{route="local"}')
        if gauge in (0.0, None) and engine_metric(engine, "vllm:num_requests_running") == 0:
            return True
        time.sleep(0.2)
    return False


def test_client_disconnect_mid_stream_stops_the_upstream(engine: EngineState) -> None:
    with serve(config(engine.url, None)) as (url, _):
        body = dict(CHAT, stream=True, max_tokens=400, ignore_eos=True)
        with (
            httpx.Client(base_url=url, timeout=60) as http,
            http.stream("POST", "/v1/chat/completions", json=body) as r,
        ):
            for _ in r.iter_bytes():
                break  # one chunk, then hang up
        assert wait_idle(engine, url), "the upstream request kept running after the client left"


def test_disconnect_before_the_first_token_and_on_a_non_streaming_request(engine: EngineState) -> None:
    """400 tokens take the CPU engine ~15 s; a client gone after 1 s must not leave them being generated."""
    with serve(config(engine.url, None)) as (url, _):
        long_prompt = [{"role": "user", "content": "x1 " * 2300}]  # a prefill of several seconds here
        for body in (
            dict(CHAT, messages=long_prompt, stream=True, max_tokens=400, ignore_eos=True),
            dict(CHAT, max_tokens=400, ignore_eos=True),  # not streamed: nothing comes back until the end
        ):
            before = engine_metric(engine, "vllm:generation_tokens_total")
            with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=url, timeout=1.0) as http:
                http.post("/v1/chat/completions", json=body)
            assert wait_idle(engine, url), "the upstream request kept running after the client left"
            generated = engine_metric(engine, "vllm:generation_tokens_total") - before
            assert generated < 400, f"{generated} tokens generated for a client that had left"


def test_tool_call_deltas_and_finish_reason_match_on_both_routes(
    engine: EngineState, external_engine: EngineState
) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    tools = [{"type": "function", "function": {"name": "add", "parameters": schema}}]
    body = dict(CHAT, messages=[{"role": "user", "content": "Add 17 and 25."}], tools=tools, tool_choice="required")
    body["max_tokens"] = 40
    with serve(config(engine.url, external_engine.url, min_hold_s=0)) as (url, _), _client(url) as http:
        client = StreamClient(url, options=ClientOptions())
        local = asyncio.run(client.send("chat", dict(body)))
        http.post("/admin/maintenance", json={"active": True}, headers=ADMIN)
        external = asyncio.run(client.send("chat", dict(body)))
    assert local.ok and external.ok
    assert local.tool_calls and [c["function"] for c in local.tool_calls] == [
        c["function"] for c in external.tool_calls
    ]
    assert local.finish_reason == external.finish_reason
    assert len(local.chunk_ns) == len(external.chunk_ns)  # the same deltas, passed on one by one


def test_limits_and_bad_input(engine: EngineState) -> None:
    cfg = config(engine.url, None)
    cfg.max_body_bytes = 4096
    with serve(cfg) as (url, _), _client(url) as http:
        big = dict(CHAT, messages=[{"role": "user", "content": "x" * 10_000}])
        assert http.post("/v1/chat/completions", json=big).status_code == 413
        assert http.post("/v1/chat/completions", content=b"{nope").status_code == 400
        assert http.get("/v1/models").json()["data"][0]["id"] == "smollm2-135m-instruct"
        assert http.get("/readyz").json()["ready"]


def test_external_errors_leave_local_healthy_and_the_alias_is_rewritten(
    engine: EngineState, external_engine: EngineState
) -> None:
    aliased = dict(CHAT, model="my-alias")
    cfg = config(f"http://127.0.0.1:{free_port()}", external_engine.url, health_interval_s=60)
    assert cfg.external is not None
    cfg.external.model = "smollm2-135m-instruct"
    with serve(cfg) as (url, gateway), _client(url) as http:
        reply = http.post("/v1/chat/completions", json=aliased)  # local is down: failover to external
        assert reply.status_code == 200 and reply.headers["x-servelab-route"] == "external"
        assert reply.json()["model"] == "smollm2-135m-instruct"  # the alias went out as the external name
    wrong_key = config(engine.url, external_engine.url, key_env="SERVELAB_TEST_NO_SUCH_KEY")
    with serve(wrong_key) as (url, gateway), _client(url) as http:
        http.post("/admin/maintenance", json={"active": True}, headers=ADMIN)
        reply = http.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 502 and reply.headers["x-servelab-route"] == "external"  # the gateway's key
        assert reply.json()["error"]["type"] == "upstream_auth_error"  # not the client's authentication error
        time.sleep(0.5)
        assert gateway.health.healthy  # an external 401 says nothing about local
