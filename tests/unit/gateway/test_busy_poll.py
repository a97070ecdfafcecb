"""Polling instead of sleeping (gateway/poll.py): always ([server] busy_poll_us: while a request is in flight and
for the linger after it), or from an upstream write to its first byte (bounded, only at low load, then a linger):
the loop sleeps again when it should; with both off nothing spins; the gateway serves the same either way."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pydantic import ValidationError

from servelab.gateway import GatewayConfig, running
from servelab.gateway.config import Keys, Policy, Server, Upstream
from servelab.gateway.poll import BusyPoll, PollSettings, auto_poll
from servelab.gateway.run import poll_settings
from tests.fixtures.hostile_peers import HostileUpstream, hostile_upstream, tokenizer_folder, url


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


def ok_upstream(up: HostileUpstream) -> Upstream:
    return Upstream(url=url(up, "ok"), health_path="/v1/models", tokenizer=tokenizer_folder())


def test_the_loop_polls_while_a_request_is_in_flight_and_stops_after_the_linger() -> None:
    async def scenario() -> tuple[int, int, bool, int]:
        poll = BusyPoll(asyncio.get_running_loop(), PollSettings(busy_linger_s=0.05))
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


@pytest.mark.parametrize("server", [Server(busy_poll_us=2000), Server(first_byte_poll_ms=50, poll_linger_us=1000)])
def test_the_gateway_serves_streams_the_same_with_polling_on(server: Server) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with hostile_upstream() as up:
        config = GatewayConfig(port=0, local=ok_upstream(up),
                               policy=Policy(health_interval_s=30), keys=Keys(), server=server)  # fmt: skip
        with running(config) as (base, _), httpx.Client(base_url=base, timeout=10) as http:
            replies = [http.post("/v1/chat/completions", json=chat) for _ in range(20)]
    assert all(r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]") for r in replies)
    assert all('"usage"' not in r.text for r in replies)  # the usage-only chunk it did not ask for is dropped


def _first_byte_run(settings: PollSettings, steps: list[str]) -> list[int]:
    """Turns of the poller in 20 ms after each step (hold, expect, arrived, release, or wait:SECONDS)."""

    async def scenario() -> list[int]:
        poll = BusyPoll(asyncio.get_running_loop(), settings)
        turns = []
        for step in steps:
            if step.startswith("wait:"):
                await asyncio.sleep(float(step[5:]))
            else:
                getattr(poll, step)()
            turns.append(await _turns_during(poll, 0.02))
        return turns

    return asyncio.run(scenario())


def test_first_byte_polling_spins_from_the_upstream_write_to_the_first_byte() -> None:
    turns = _first_byte_run(PollSettings(first_byte_s=0.5), ["hold", "expect", "arrived", "release"])
    assert turns[0] == 0  # a request in, not yet sent upstream: no reason to spin
    assert turns[1] > 10  # waiting for the first byte
    assert turns[2] <= 1 and turns[3] == 0  # it came: asleep again (one turn to notice), no linger set


def test_first_byte_polling_gives_up_at_its_bound_and_lingers_after_an_answer() -> None:
    slow = _first_byte_run(PollSettings(first_byte_s=0.1), ["hold", "expect", "wait:0.15"])
    assert slow[1] > 10 and slow[2] == 0  # a long prefill: polled 100 ms, then slept though still awaited
    linger = _first_byte_run(PollSettings(first_byte_s=0.5, linger_s=0.2), ["hold", "expect", "arrived", "release"])
    assert linger[3] > 10  # the answer ended: polling on for the same client's next request
    done = _first_byte_run(PollSettings(first_byte_s=0.5, linger_s=0.05), ["hold", "release", "wait:0.1"])
    assert done[2] == 0  # and asleep after the linger


def test_first_byte_polling_stays_off_under_load() -> None:
    """Past max_in_flight the loop is woken by traffic anyway: no spinning to buy it."""
    turns = _first_byte_run(PollSettings(first_byte_s=0.5, linger_s=0.2, max_in_flight=1),
                            ["hold", "hold", "expect", "release", "expect"])  # fmt: skip
    assert turns[2] == 0  # two in flight, one allowed
    assert turns[4] > 10  # one left: polls again


def test_polling_defaults_follow_the_hosts_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    assert auto_poll(2) == (0, 0) and auto_poll(7) == (0, 0)
    assert auto_poll(8) == (50, 3000) and auto_poll(128) == (50, 3000)
    config = GatewayConfig(local=Upstream(url="http://127.0.0.1:9"))
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert poll_settings(config) == PollSettings(first_byte_s=0.05, linger_s=0.003)
    off = config.model_copy(update={"server": Server(first_byte_poll_ms=0)})
    assert not poll_settings(off).enabled  # the operator's 0 wins over the host's cores
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert not poll_settings(config).enabled
    both = config.model_copy(update={"server": Server(first_byte_poll_ms=20, poll_linger_us=0, busy_poll_us=500)})
    assert poll_settings(both) == PollSettings(first_byte_s=0.02, linger_s=0.0, busy_linger_s=0.0005)
    with pytest.raises(ValidationError):
        Server(first_byte_poll_ms=-1)
    with pytest.raises(ValidationError):
        Server(poll_linger_us=2_000_000)


def test_the_gateway_polls_while_its_upstream_is_silent_and_stops_at_the_bound() -> None:
    """A hostile upstream FIXTURE that never answers (a prefill that does not end): the gateway's loop polls
    from its write upstream for first_byte_poll_ms, then sleeps though the request still waits."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with hostile_upstream() as up:
        config = GatewayConfig(port=0, local=Upstream(url=url(up, "hang"), health_path="/v1/models", read_timeout_s=3,
                                                  tokenizer=tokenizer_folder()),
                               policy=Policy(health_interval_s=30), keys=Keys(),
                               server=Server(first_byte_poll_ms=400, poll_linger_us=0))  # fmt: skip
        with running(config) as (base, gateway), httpx.Client(base_url=base, timeout=10) as http, \
                ThreadPoolExecutor(1) as pool:  # fmt: skip
            reply = pool.submit(http.post, "/v1/chat/completions", json=chat)
            time.sleep(0.2)
            during = (gateway.poll.spinning, gateway.poll.awaiting)
            time.sleep(0.5)
            after = (gateway.poll.spinning, gateway.poll.awaiting, reply.done())
            status = reply.result().status_code
    assert during == (True, 1)
    assert after == (False, 1, False)  # past the bound: asleep, the request still waiting on its upstream
    assert status == 503  # no first byte within read_timeout_s, nowhere to fail over


def test_a_linger_runs_the_rehearsal_once_on_the_next_turn() -> None:
    async def scenario() -> list[int]:
        calls: list[int] = []
        poll = BusyPoll(asyncio.get_running_loop(), PollSettings(first_byte_s=0.5, linger_s=0.05),
                        on_linger=lambda: calls.append(1))  # fmt: skip
        poll.hold()
        poll.expect()
        poll.arrived()
        seen = [len(calls)]
        poll.release()
        seen.append(len(calls))  # not inside the answer's own callback
        await asyncio.sleep(0)
        seen.append(len(calls))
        await asyncio.sleep(0.1)
        return [*seen, len(calls)]

    assert asyncio.run(scenario()) == [0, 0, 1, 1]


def test_the_rehearsal_has_no_effect_beyond_the_caches() -> None:
    """Against a hostile upstream FIXTURE that counts what reaches it: rehearsals send nothing upstream, charge
    no prefill budget and move no metric; what they encode is what the canned request would have sent."""
    from servelab.gateway.app import Gateway
    from servelab.gateway.run import limits
    from servelab.gateway.warm import Rehearsal

    with hostile_upstream() as up:
        config = GatewayConfig(port=0, local=ok_upstream(up),
                               policy=Policy(health_interval_s=30), keys=Keys(clients=["k"]))  # fmt: skip

        async def scenario() -> tuple[bytes, int, bytes, bytes]:
            gateway = Gateway(config)
            await gateway.start()
            try:
                before = gateway.metrics.exposition()
                rehearse = Rehearsal(limits(config), 64, gateway.rehearse)
                for _ in range(3):
                    rehearse()
                wire = gateway.rehearse(rehearse.parse(), {"stream": True})
                return wire, (await gateway.store.snapshot()).prefill_tokens, before, gateway.metrics.exposition()
            finally:
                await gateway.stop()

        wire, prefill, before, after = asyncio.run(scenario())
        posts = up.seen["ok"]
    assert posts == 0  # nothing was sent upstream (its health check is a GET)
    assert prefill == 0 and before == after
    assert wire.startswith(b"POST /ok/v1/chat/completions HTTP/1.1\r\n") and b'"include_usage":true' in wire
