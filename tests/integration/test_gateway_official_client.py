"""The official openai client (sync and async) through servelab gateway to the real embedded vLLM: what a user's
application does, streaming and not, one client reusing its connections, errors as the SDK's own exceptions."""

from __future__ import annotations

import asyncio

import openai
import pytest

from servelab.engines.embedded import EngineState
from servelab.gateway import running
from servelab.gateway.config import GatewayConfig, Keys, Policy, Upstream

MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": "Name three colours."}]
WAIT_S = 120.0  # a prefill on this machine's two cores


def _config(engine: EngineState) -> GatewayConfig:
    return GatewayConfig(port=0, local=Upstream(url=engine.url), policy=Policy(health_interval_s=5),
                         keys=Keys(clients=["app-key"]))  # fmt: skip


def _text(stream: openai.Stream[openai.types.chat.ChatCompletionChunk]) -> tuple[str, list[int]]:
    parts, usage = [], []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage.append(chunk.usage.completion_tokens)
    return "".join(parts), usage


def test_the_sync_client_streams_the_same_text_as_the_engine_directly(engine: EngineState) -> None:
    """Temperature 0: through the gateway, the text and the usage chunk are what the engine itself gives; the
    route header reaches the SDK's raw response."""
    kwargs = {"model": MODEL, "messages": ASK, "max_tokens": 12, "temperature": 0.0, "stream": True,
              "stream_options": {"include_usage": True}}  # fmt: skip
    direct = openai.OpenAI(base_url=f"{engine.url}/v1", api_key="none", timeout=WAIT_S)
    with running(_config(engine)) as (base, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="app-key", timeout=WAIT_S, max_retries=0)
        via, via_usage = _text(client.chat.completions.create(**kwargs))  # type: ignore[call-overload]
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=4)
        models = [m.id for m in client.models.list()]
    alone, alone_usage = _text(direct.chat.completions.create(**kwargs))  # type: ignore[call-overload]
    assert via and via == alone
    assert via_usage == alone_usage and len(via_usage) == 1  # one usage chunk, as asked
    assert raw.headers["x-servelab-route"] == "local" and raw.parse().choices[0].message.content is not None
    assert MODEL in models


def test_the_async_client_runs_concurrent_streams_on_its_pool(engine: EngineState) -> None:
    """Eight streams at once, then eight more on the same AsyncOpenAI client (its pooled keep-alive connections
    reused through the gateway): every one ends with a finish reason."""

    async def one(client: openai.AsyncOpenAI) -> str | None:
        stream = await client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=6, stream=True)
        reason = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                reason = chunk.choices[0].finish_reason
        return reason

    async def rounds(base: str) -> list[str | None]:
        async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="app-key", timeout=WAIT_S) as client:
            first = await asyncio.gather(*(one(client) for _ in range(8)))
            return first + list(await asyncio.gather(*(one(client) for _ in range(8))))

    with running(_config(engine)) as (base, _):
        reasons = asyncio.run(rounds(base))
    assert len(reasons) == 16 and all(r in ("stop", "length") for r in reasons)


def test_the_sdk_sees_the_gateways_refusals_as_its_own_exceptions(engine: EngineState) -> None:
    """A bad key, a bad body and a legacy completion: the SDK's typed errors and a working /v1/completions."""
    with running(_config(engine)) as (base, _):
        stranger = openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", timeout=WAIT_S, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            stranger.models.list()
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="app-key", timeout=WAIT_S, max_retries=0)
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(model=MODEL, messages="not a list", max_tokens=4)  # type: ignore[arg-type]
        legacy = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=4, temperature=0.0)
    assert "messages" in str(bad.value)
    assert legacy.choices[0].text and legacy.usage is not None and legacy.usage.completion_tokens == 4
