"""The admission's figure against the embedded vLLM's own count (its /tokenize, which renders and tokenizes as a
request does, and for a sample its usage.prompt_tokens), on generated bodies over both endpoints: never below it;
and through a gateway holding a realtime lease, no request whose real count is over the threshold runs locally,
and concurrent requests never put more real prefill tokens on local than the budget."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.engines.embedded import EngineState
from servelab.gateway.admission import CHAT, COMPLETIONS, TokenCounter, Uncountable
from servelab.gateway.config import GatewayConfig, Keys, Policy, Upstream
from tests.fixtures.prompt_strategies import CHAT_BODY, COMPLETIONS_BODY, TEXT
from tests.integration.test_gateway import ADMIN, serve

pytestmark = pytest.mark.integration
CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
TOKENIZE_KEYS = ("messages", "tools", "chat_template_kwargs", "add_generation_prompt")


@pytest.fixture(scope="module")
def counter(model_folder: Path) -> TokenCounter:
    return TokenCounter.from_folder(model_folder)


@pytest.fixture(scope="module")
def http(engine: EngineState) -> httpx.Client:
    with httpx.Client(base_url=engine.url, timeout=60) as client:
        yield client


def engine_count(http: httpx.Client, path: str, body: dict[str, Any]) -> int | None:
    """What the engine itself counts for ``body`` (None: it refuses the body, so nothing is prefilled)."""
    if path == CHAT:
        return _tokenize(http, {"model": body["model"], **{k: body[k] for k in TOKENIZE_KEYS if k in body}})
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return _tokenize(http, {"model": body["model"], "prompt": prompt})
    if all(isinstance(p, int) for p in prompt):
        return len(prompt)
    counts = [_tokenize(http, {"model": body["model"], "prompt": p}) if isinstance(p, str) else len(p) for p in prompt]
    return None if None in counts else sum(c for c in counts if c is not None)


def _tokenize(http: httpx.Client, payload: dict[str, Any]) -> int | None:
    reply = http.post("/tokenize", json=payload)
    return int(reply.json()["count"]) if reply.status_code == 200 else None


def _check(counter: TokenCounter, http: httpx.Client, path: str, body: dict[str, Any], bound_max: int) -> None:
    real = engine_count(http, path, body)
    try:
        figure = counter.count(path, body, bound_max)
    except Uncountable:
        return  # long: routed as over the threshold
    if real is not None:
        assert figure.tokens >= real, (figure, real, body)


@settings(max_examples=3000, deadline=None, suppress_health_check=CHECKS)
@given(body=CHAT_BODY, bound_max=st.sampled_from([0, 1024, 1 << 40]))
def test_a_chat_figure_is_never_below_the_engines_count(
    counter: TokenCounter, http: httpx.Client, body: dict[str, Any], bound_max: int
) -> None:
    _check(counter, http, CHAT, body, bound_max)


@settings(max_examples=2000, deadline=None, suppress_health_check=CHECKS)
@given(body=COMPLETIONS_BODY, bound_max=st.sampled_from([0, 1024, 1 << 40]))
def test_a_completions_figure_is_never_below_the_engines_count(
    counter: TokenCounter, http: httpx.Client, body: dict[str, Any], bound_max: int
) -> None:
    _check(counter, http, COMPLETIONS, body, bound_max)


@settings(max_examples=40, deadline=None, suppress_health_check=CHECKS)
@given(text=TEXT.filter(bool), system=st.booleans())
def test_the_figure_is_never_below_the_usage_the_engine_reports(
    counter: TokenCounter, http: httpx.Client, text: str, system: bool
) -> None:
    messages = [{"role": "system", "content": text}] * system + [{"role": "user", "content": text}]
    body = {"model": "smollm2-135m-instruct", "messages": messages, "max_tokens": 1}
    reply = http.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    assert counter.count(CHAT, body, 0).tokens >= reply.json()["usage"]["prompt_tokens"]


@settings(max_examples=80, deadline=None, suppress_health_check=CHECKS)
@given(body=CHAT_BODY)
def test_a_generated_chat_is_never_counted_below_the_usage_of_its_real_request(
    counter: TokenCounter, http: httpx.Client, body: dict[str, Any]
) -> None:
    """The whole generated body sent as a request (one token out): the engine's own usage.prompt_tokens is the
    oracle, so every field vLLM reads counts, not only those /tokenize takes."""
    body = {**body, "max_tokens": 1, "n": 1}
    reply = http.post("/v1/chat/completions", json=body)
    try:
        figure = counter.count(CHAT, body, 1024, long_at=8000)
    except Uncountable:
        return
    if reply.status_code == 200:
        assert figure.tokens >= reply.json()["usage"]["prompt_tokens"], (figure, body)


def _lease_config(engine: EngineState, model_folder: Path, threshold: int, budget: int) -> GatewayConfig:
    return GatewayConfig(
        local=Upstream(url=engine.url, connect_timeout_s=2, tokenizer=str(model_folder)),
        policy=Policy(
            prefill_threshold_tokens=threshold, realtime_prefill_budget_tokens=budget, health_interval_s=5, min_hold_s=0
        ),
        keys=Keys(admin=["admin-key"]),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=CHECKS)
@given(body=CHAT_BODY)
def test_with_a_lease_held_nothing_over_the_threshold_runs_locally(
    engine: EngineState, model_folder: Path, body: dict[str, Any]
) -> None:
    """Through a gateway (no external API: a long request is shed with 429), a request that ran locally used at
    most the threshold's tokens by the engine's own usage."""
    body = {k: v for k, v in body.items() if k not in ("n", "response_format")} | {"max_tokens": 1}
    with (
        serve(_lease_config(engine, model_folder, threshold=64, budget=1 << 20)) as (url, _),
        httpx.Client(base_url=url, timeout=120) as gw,
    ):
        gw.post("/admin/realtime", json={"active": True, "ttl_s": 60}, headers=ADMIN).raise_for_status()
        reply = gw.post("/v1/chat/completions", json=body)
    if reply.headers.get("x-servelab-route") == "local" and reply.status_code == 200:
        assert reply.json()["usage"]["prompt_tokens"] <= 64


def test_concurrent_requests_never_hold_more_real_prefill_on_local_than_the_budget(
    fixture_server: str, model_folder: Path, counter: TokenCounter
) -> None:
    """Six requests of 7,900 digits each (a token a digit: the four-bytes guess said ~2,000) at once, against a
    slow local FIXTURE (its first byte after 3 s: a timing a real engine cannot hold on demand) with a lease held:
    the ones let through hold at most the 16,000-token budget in real tokens; the rest are shed."""
    config = GatewayConfig(
        local=Upstream(url=f"{fixture_server}/slow", health_path="/v1/models", tokenizer=str(model_folder)),
        policy=Policy(prefill_threshold_tokens=8000, realtime_prefill_budget_tokens=16000, min_hold_s=0),
        keys=Keys(admin=["admin-key"]),
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "7" * 7900}], "max_tokens": 2}  # fmt: skip
    real = len(counter.tokenizer.encode(counter.template.render(  # type: ignore[union-attr]
        {"messages": body["messages"], "add_generation_prompt": True})).ids)  # fmt: skip
    assert real > 7900
    with serve(config) as (url, _), httpx.Client(base_url=url, timeout=60) as gw:
        gw.post("/admin/realtime", json={"active": True, "ttl_s": 60}, headers=ADMIN).raise_for_status()
        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(lambda _: gw.post("/v1/chat/completions", json=body), range(6)))
    local = [r for r in replies if r.headers.get("x-servelab-route") == "local"]
    shed = [r for r in replies if r.status_code == 429]
    assert len(local) * real <= 16000 and len(local) + len(shed) == 6
    assert len(local) == math.floor(16000 / int(local[0].headers["x-servelab-tokens"].split(";")[0]))
