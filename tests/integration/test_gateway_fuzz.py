"""Fuzzed request bodies through the gateway to the embedded engine: whatever comes in, the gateway answers
with the upstream's verdict or its own deliberate error, never a crash (500) and never a 5xx without saying
which route failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from servelab.engines.embedded import EngineState
from tests.fixtures.fuzz_strategies import ANY_JSON, BODY
from tests.integration.test_gateway import config, serve


@pytest.fixture(scope="module")
def gateway_url(engine: EngineState) -> Iterator[str]:
    with serve(config(engine.url, None, health_interval_s=60)) as (url, _):
        yield url


def _check(reply: httpx.Response) -> None:
    assert reply.status_code != 500, reply.text
    if reply.status_code >= 500:  # deliberate: no backend could serve, and it says where it went
        assert reply.headers.get("x-servelab-route") and "error" in reply.json()


@pytest.mark.integration
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODY, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
@example(  # found by this test: a stream_options that is not an object crashed the gateway (500)
    body={"messages": [], "max_tokens": 0, "stream": True, "stream_options": True}, path="/v1/chat/completions"
)
def test_fuzzed_bodies_never_crash_the_gateway(gateway_url: str, body: dict[str, Any], path: str) -> None:
    with httpx.Client(base_url=gateway_url, timeout=60) as http:
        if body.get("stream") is True:
            with http.stream("POST", path, json=body) as reply:
                reply.read()
        else:
            reply = http.post(path, json=body)
    _check(reply)


@pytest.mark.integration
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=200), ANY_JSON.map(lambda v: json.dumps(v).encode())))
def test_fuzzed_raw_bytes_are_refused_cleanly(gateway_url: str, raw: bytes) -> None:
    with httpx.Client(base_url=gateway_url, timeout=60) as http:
        reply = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    _check(reply)
    assert reply.status_code < 500
