"""The one control-plane client against the real embedded vLLM: what it serves, its build, health, token counts
and metrics, from whatever form of its URL a user gives; a closed port answers with values, never a raise."""

from __future__ import annotations

import asyncio
import socket

import pytest

from servelab.core.errors import ServelabError
from servelab.engines.control import AsyncEngineAPI, EngineAPI, discover_model
from servelab.engines.embedded import MODEL_NAME, EngineState
from servelab.engines.prometheus import info_labels, summed


@pytest.mark.parametrize("form", ["{}", "{}/", "{}/v1", "{}/v1/"])
def test_the_control_plane_from_any_form_of_the_url(engine: EngineState, form: str) -> None:
    api = EngineAPI(form.format(engine.url))
    assert api.root == engine.url and api.base == engine.url + "/v1"
    assert api.healthy() and api.models() == [MODEL_NAME] and api.first_model() == MODEL_NAME
    described = api.describe()
    assert described.models_error is None and described.models[0]["id"] == MODEL_NAME
    assert described.server_version  # vLLM answers /version
    samples = api.metrics()
    cache = info_labels(samples, "vllm:cache_config_info")
    assert cache is not None and int(cache["block_size"]) > 0
    assert "vllm:num_requests_running" in summed(samples, ("vllm:",))


def test_token_counts_come_from_the_engine(engine: EngineState) -> None:
    async def counts() -> tuple[int | None, int | None, int | None]:
        api = AsyncEngineAPI(engine.url)
        try:
            short, long = await api.tokens(MODEL_NAME, "hello"), await api.tokens(MODEL_NAME, "hello " * 200)
            return short, long, await api.tokens("no-such-model", "hello")
        finally:
            await api.aclose()

    short, long, unknown = asyncio.run(counts())
    assert short is not None and long is not None and 0 < short < long and long >= 200
    assert unknown is None  # the engine refuses an unknown model: no count, no exception


def test_a_closed_port_answers_with_values() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    api = EngineAPI(closed, timeout=2)
    assert not api.healthy() and api.models() == [] and api.describe().models_error
    with pytest.raises(ServelabError, match="cannot list models"):
        discover_model(closed, timeout=2)
