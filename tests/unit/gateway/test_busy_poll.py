"""Busy polling ([server] busy_poll_us): the loop keeps polling while a request is in flight and for the linger
after it, then sleeps again; with it off nothing spins. And the gateway serves the same with it on."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic import ValidationError

from servelab.gateway import GatewayConfig, running
from servelab.gateway.config import Keys, Policy, Server, Upstream
from servelab.gateway.poll import BusyPoll
from tests.fixtures.hostile_peers import hostile_upstream, url


async def _turns_during(poll: BusyPoll, seconds: float) -> int:
    """How many times the poller ran while this coroutine slept."""
    turns = 0
    spin = poll._spin

    def counted() -> None:
        nonlocal turns
        turns += 1
        spin()

    poll._spin = counted  # type: ignore[method-assign]
    await asyncio.sleep(seconds)
    poll._spin = spin  # type: ignore[method-assign]
    return turns


def test_the_loop_polls_while_a_request_is_in_flight_and_stops_after_the_linger() -> None:
    async def scenario() -> tuple[int, int, bool, int]:
        poll = BusyPoll(asyncio.get_running_loop(), linger_s=0.05)
        idle = await _turns_during(poll, 0.02)
        poll.hold()
        busy = await _turns_during(poll, 0.02)
        poll.release()
        await asyncio.sleep(0.2)  # past the linger
        after = await _turns_during(poll, 0.02)
        return idle, busy, poll.spinning, after

    idle, busy, spinning, after = asyncio.run(scenario())
    assert idle == 0 and after == 0 and not spinning
    assert busy > 10  # a sleeping loop runs no callback in 20 ms; a polling one runs one every turn


def test_busy_poll_is_bounded_in_the_config() -> None:
    with pytest.raises(ValidationError):
        Server(busy_poll_us=-1)
    with pytest.raises(ValidationError):
        Server(busy_poll_us=10**9)


def test_the_gateway_serves_streams_the_same_with_busy_poll_on() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with hostile_upstream() as up:
        config = GatewayConfig(port=0, local=Upstream(url=url(up, "ok"), health_path="/v1/models"),
                               policy=Policy(health_interval_s=30), keys=Keys(),
                               server=Server(busy_poll_us=2000))  # fmt: skip
        with running(config) as (base, _), httpx.Client(base_url=base, timeout=10) as http:
            replies = [http.post("/v1/chat/completions", json=chat) for _ in range(20)]
    assert all(r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]") for r in replies)
    assert all('"usage"' not in r.text for r in replies)  # the usage-only chunk it did not ask for is dropped
