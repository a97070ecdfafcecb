"""The Redis store's own ways of failing, against a real redis-server: stopped, frozen (SIGSTOP), restarted,
flushed mid-run, holding garbage, answering garbage; a replica that stops renewing (its charges end with their
TTL). Nothing here raises to a request: a fault is a degraded answer from local state, a lease call a clear
StoreUnavailable. Waits are on conditions with generous deadlines, never on timing margins."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from servelab.gateway.store import Limits, RedisStore, Settings, StoreUnavailable
from tests.fixtures.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]
FAST = Settings(min_hold_s=0.0, charge_ttl_s=1.0, timeout_s=0.3, retry_s=0.2, recovery_s=30.0, budget=1000)
LIMITS = Limits(threshold=1000, budget=1000)
DEADLINE_S = 30.0


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


_OPEN: list[RedisStore] = []


def stores(server: RedisServer, count: int = 2, settings: Settings = FAST) -> list[RedisStore]:
    made = [RedisStore(server.url, "t:", settings) for _ in range(count)]
    _OPEN.extend(made)
    return made


def run(work: Callable[[], Awaitable[Any]]) -> Any:
    """``work`` on a new loop; every store it made closed on the way out (a failed check included)."""

    async def go() -> Any:
        try:
            return await work()
        finally:
            while _OPEN:
                await _OPEN.pop().close()

    return asyncio.run(go())


@pytest.fixture()
def server(redis_server: RedisServer) -> Iterator[RedisServer]:
    yield redis_server


def test_redis_stopped_then_restarted_degrades_and_comes_back(server: RedisServer) -> None:
    async def go() -> None:
        one, two = stores(server)
        await one.hold("realtime", "voice", 60)
        assert await one.admit("before", 200, LIMITS)
        await two.renew()  # two replicas are alive (as every snapshot says): a share is half the budget
        assert (await one.snapshot()).prefill_tokens == 200 and one.owners == 2
        server.stop()
        seen = await one.snapshot()
        assert seen.degraded and seen.realtime  # its own 200, and the other replica's share as if in use:
        assert seen.prefill_tokens == 200 + 500
        assert await one.admit("during", 300, LIMITS)  # 500 of its share of 500
        assert not await one.admit("over", 1, LIMITS)
        assert not await one.admit("long", 1001, LIMITS)
        with pytest.raises(StoreUnavailable) as refused:
            await one.hold("realtime", "voice", 60)
        assert refused.value.retry_after_s >= 1 and "redis" in refused.value.why
        state = await one.state()
        assert state.degraded and state.realtime.on and state.prefill_tokens == 500
        server.start()  # empty: the state was lost with the process
        await until(lambda: _healthy(two), "the breaker did not close after Redis came back")
        await until(lambda: _total_is(two, 500), "the charges were not written back once")
        await one.release("before")
        await one.release("before")
        await until(lambda: _total_is(two, 300), "a release after recovery was not applied once")
        await one.release("during")
        assert (await two.snapshot()).prefill_tokens == 0
        for store in (one, two):
            await store.close()

    run(go)


def test_redis_frozen_answers_within_the_timeout_then_thaws(server: RedisServer) -> None:
    async def go() -> None:
        (one,) = stores(server, 1)
        await one.hold("realtime", "voice", 60)
        server.freeze()
        try:
            seen = await asyncio.wait_for(one.snapshot(), DEADLINE_S)  # bounded by timeout_s, not by Redis
            assert seen.degraded and seen.realtime
            assert await asyncio.wait_for(one.admit("r", 10, LIMITS), DEADLINE_S)
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(one.drop("realtime", "voice"), DEADLINE_S)
        finally:
            server.thaw()
        await until(lambda: _healthy(one), "the breaker did not close after Redis thawed")
        state = await one.state()
        assert [v.id for v in state.realtime.leases] == ["voice"] and state.prefill_tokens == 10
        await one.close()

    run(go)


def test_a_replica_that_stops_renewing_loses_its_charges_within_their_ttl(server: RedisServer) -> None:
    async def go() -> None:
        dead, live = stores(server)
        assert await dead.admit("a", 400, LIMITS) and await dead.admit("b", 300, LIMITS)
        assert (await live.snapshot()).prefill_tokens == 700
        assert dead._keeper is not None
        dead._keeper.cancel()  # as if killed: no release, no renewal
        await until(lambda: _total_is(live, 0), "a dead replica's charges outlived their TTL")
        await dead.redis.aclose()
        await live.close()

    run(go)


def test_a_flush_mid_run_assumes_realtime_until_every_replica_wrote_back(server: RedisServer) -> None:
    async def go() -> None:
        one, two = stores(server)
        await one.hold("realtime", "voice", 60)
        assert await one.admit("r", 300, LIMITS)
        await two.renew()
        assert (await two.snapshot()).prefill_tokens == 300
        server.command("FLUSHALL")
        seen = await two.snapshot()  # the voice's lease is gone with the state, and so are the charges:
        assert seen.realtime and not seen.degraded  # realtime is assumed on while replicas recover
        assert two.owners == 2  # as it knew them before: its share is half the budget until all wrote back
        assert await two.admit("x", 500, LIMITS) and not await two.admit("y", 1, LIMITS)
        await two.release("x")
        await one.renew()
        assert (await two.snapshot()).prefill_tokens == 300  # written back, once
        await one.renew()
        assert (await two.snapshot()).prefill_tokens == 300
        await one.release("r")
        assert (await two.snapshot()).prefill_tokens == 0
        for store in (one, two):
            await store.close()

    run(go)


@pytest.mark.parametrize(
    "garbage",
    [("SET", "t:sums", "x"), ("SET", "t:owners", "x"), ("SET", "t:leases:realtime", "x"), ("SET", "t:flags", "x")],
)
def test_garbage_in_redis_degrades_and_clears(server: RedisServer, garbage: tuple[str, ...]) -> None:
    async def go() -> None:
        (one,) = stores(server, 1)
        assert (await one.snapshot()).degraded is None
        server.command(*garbage)
        seen = await one.snapshot()
        assert seen.degraded and "WRONGTYPE" in seen.degraded
        assert (await one.state()).degraded
        server.command("DEL", garbage[1])
        await until(lambda: _healthy(one), "the breaker did not close once the garbage was gone")
        await one.close()

    run(go)


def test_garbage_answers_degrade(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        (one,) = stores(server, 1)
        for answer in ([], ["x"], [1, 2], "OK", None, [["nested"], 1, 1, 1, "epoch"]):

            async def garbage(*args: object, answer: object = answer, **kwargs: object) -> object:
                return answer

            one.fault = None
            monkeypatch.setitem(one.scripts, "SNAPSHOT", garbage)
            monkeypatch.setitem(one.scripts, "STATE", garbage)
            assert (await one.snapshot()).degraded, answer
            one.fault = None
            assert (await one.state()).degraded, answer
        await one.close()

    run(go)


def test_a_huge_ttl_is_refused_by_the_api_and_bounded_in_redis(server: RedisServer) -> None:
    async def go() -> None:
        (one,) = stores(server, 1)
        await one.hold("realtime", "long", 10.0**12)  # the store keeps what it is given, in Redis's integers
        state = await one.state()
        assert state.realtime.on and state.realtime.leases[0].expires_in_s is not None
        assert state.realtime.leases[0].expires_in_s > 10.0**11
        await one.drop("realtime", "long")
        assert not (await one.snapshot()).realtime
        await one.close()

    run(go)


async def _healthy(store: RedisStore) -> bool:
    return (await store.snapshot()).degraded is None


async def _total_is(store: RedisStore, tokens: int) -> bool:
    seen = await store.snapshot()
    return seen.degraded is None and seen.prefill_tokens == tokens


def test_an_admission_cut_off_mid_call_leaves_no_charge(server: RedisServer) -> None:
    """A client that hangs up while its admission is on the wire (Redis frozen: the script runs later, after
    the cancellation): the charge the script made is dropped by the next write-back, never counted for good."""

    async def go() -> None:
        one, two = stores(server)
        await one.renew()
        server.freeze()
        try:
            task = asyncio.get_running_loop().create_task(one.admit("cut", 400, LIMITS))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert one.ledger.total == 0
        finally:
            server.thaw()
        await until(lambda: _healthy(one), "no recovery after thaw")
        await until(lambda: _total_is(two, 0), "a cut-off admission stayed charged")

    run(go)
