"""A sample of the admission property against llama.cpp's own server: with no tokenizer in process the gateway
counts with the engine (its /apply-template, then /tokenize), and that figure is never below the
usage.prompt_tokens llama-server reports for the same request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.engines.embedded import EngineState
from servelab.gateway import running
from servelab.gateway.config import GatewayConfig, Keys, Policy, Upstream
from tests.fixtures.prompt_strategies import TEXT

pytestmark = pytest.mark.integration
CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"]),
     "content": st.one_of(TEXT, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
                                         min_size=1, max_size=2))}
)  # fmt: skip


@pytest.fixture(scope="module")
def gateway(llamacpp_engine: EngineState) -> Any:
    config = GatewayConfig(local=Upstream(url=llamacpp_engine.url, connect_timeout_s=2), port=0,
                           policy=Policy(health_interval_s=5), keys=Keys())  # fmt: skip
    with running(config) as (url, _), httpx.Client(base_url=url, timeout=120) as http:
        yield http


@settings(max_examples=40, deadline=None, suppress_health_check=CHECKS)
@given(messages=st.lists(MESSAGE, min_size=1, max_size=3).map(lambda m: [*m, {"role": "user", "content": "ok"}]))
def test_the_engine_count_is_never_below_llama_servers_usage(gateway: httpx.Client, messages: list[Any]) -> None:
    reply = gateway.post("/v1/chat/completions", json={"model": "m", "messages": messages, "max_tokens": 1})
    figure, method = reply.headers["x-servelab-tokens"].split(";")
    if reply.status_code != 200 or method == "uncounted":
        return  # llama-server refused it (nothing prefilled), or it was long
    assert method == "engine" and int(figure) >= reply.json()["usage"]["prompt_tokens"], (figure, messages)
