"""The state stores (memory, host file, Redis) keep one set of rules (gateway/store/base.py): leases per session,
independent, bounded, on the store's clock, with the hold; charges checked and taken in one step, owned per
request, given back once. Every rule here runs against every backend; each backend's own ways of failing are in
test_store_host.py and test_store_redis.py."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from servelab.gateway.store import (
    HostStore,
    Limits,
    MemoryStore,
    RedisStore,
    Settings,
    Store,
    TooManyLeases,
    reset_host_store,
)
from tests.fixtures.redis_server import RedisServer, need_redis

OPEN = Limits(threshold=8000, budget=10_000)
Make = Callable[[], Store]


class Clock:
    """A store clock that moves only when told (the Redis store reads Redis TIME instead)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis_once() -> Iterator[RedisServer]:
    need_redis()
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["memory", "host", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Settings], Make]]:
    """A factory of stores that share one state (memory: one store), each test on a fresh state."""
    kind = request.param
    if kind == "redis":
        server = request.getfixturevalue("redis_once")
        server.command("FLUSHALL")
        # a generous wait on each call: these tests are about the state, not Redis's speed on a busy machine
        yield lambda settings: lambda: RedisStore(server.url, "t:", replace(settings, timeout_s=30.0))
        return
    if kind == "host":
        path = str(tmp_path / "state")
        reset_host_store(path)
        yield lambda settings: lambda: HostStore(path, settings)
        return
    yield lambda settings: (lambda one: lambda: one)(MemoryStore(settings))


@asynccontextmanager
async def opened(make: Make, count: int = 2) -> AsyncIterator[list[Store]]:
    stores = [make() for _ in range(count)]
    try:
        yield stores
    finally:
        for store in {id(s): s for s in stores}.values():
            await store.close()


def run(work: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(work())


def test_two_sessions_leases_are_independent(backend: Callable[[Settings], Make]) -> None:
    make = backend(Settings(min_hold_s=0.0))

    async def go() -> None:
        async with opened(make) as (one, two):
            await one.hold("realtime", "voice-a", 60)
            await two.hold("realtime", "voice-b", 1)
            await two.drop("realtime", "voice-b")  # session B ends: session A's lease stays
            assert (await one.snapshot()).realtime and (await two.snapshot()).realtime
            await two.hold("realtime", "voice-b", 0.05)  # B's short renewal does not shorten A's
            state = await one.state()
            assert "voice-a" in [v.id for v in state.realtime.leases]
            a = next(v for v in state.realtime.leases if v.id == "voice-a")
            assert a.expires_in_s is not None and 50 < a.expires_in_s <= 60
            await one.drop("realtime", "voice-a")
            await two.drop("realtime", "voice-b")
            assert not (await two.snapshot()).realtime  # no hold: off with the last lease

    run(go)


def test_leases_are_bounded_and_a_renewal_is_never_refused(backend: Callable[[Settings], Make]) -> None:
    make = backend(Settings(min_hold_s=0.0, max_leases=2))

    async def go() -> None:
        async with opened(make) as (one, two):
            await one.hold("realtime", "a", 30)
            await two.hold("realtime", "b", 30)
            with pytest.raises(TooManyLeases):
                await one.hold("realtime", "c", 30)
            await two.hold("realtime", "a", 30)  # a renewal (through another replica)
            await one.hold("maintenance", "admin", None)  # another flag: its own bound
            await one.drop("realtime", "a")
            await one.hold("realtime", "c", 30)

    run(go)


@pytest.mark.parametrize("lease", ["", "a b", "x" * 65, "-lead", "é", "voice\n1", "a/../b"])
def test_lease_ids_and_ttls_are_checked(backend: Callable[[Settings], Make], lease: str) -> None:
    make = backend(Settings())

    async def go() -> None:
        async with opened(make, 1) as (one,):
            with pytest.raises(ValueError):
                await one.hold("realtime", lease, 30)
            for ttl in (True, 0, -1, math.inf, math.nan):
                with pytest.raises(ValueError):
                    await one.hold("realtime", "voice", ttl)  # type: ignore[arg-type]
            with pytest.raises(ValueError):
                await one.hold("flags", "voice", 30)  # not a flag
            assert not (await one.snapshot()).realtime

    run(go)


def test_internal_names_are_ordinary_lease_ids(backend: Callable[[Settings], Make]) -> None:
    """A lease named like the store's own keys or fields touches nothing but itself."""
    make = backend(Settings(min_hold_s=0.0))
    names = ["owners", "sums", "epoch", "flags", "realtime_since", "recover_until", "charges:x", "admin", "t:epoch"]

    async def go() -> None:
        async with opened(make) as (one, two):
            assert await one.admit("r1", 300, OPEN)
            for name in names:
                await one.hold("realtime", name, 30)
            for name in names:
                await two.drop("realtime", name)
            seen = await two.snapshot()
            assert not seen.realtime and not seen.maintenance and seen.prefill_tokens == 300
            assert await one.admit("r2", 100, OPEN) and (await two.snapshot()).prefill_tokens == 400

    run(go)


def test_the_budget_is_checked_and_charged_in_one_step(backend: Callable[[Settings], Make]) -> None:
    make = backend(Settings(min_hold_s=0.0))
    limits = Limits(threshold=500, budget=1000)

    async def go() -> None:
        async with opened(make) as (one, two):
            assert await one.admit("a", 900, limits)  # realtime off: charged, never refused
            assert await two.admit("b", 900, limits)
            await one.release("a")
            await two.release("b")
            await one.hold("realtime", "voice", 60)
            assert not await one.admit("long", 501, limits)  # over the threshold
            tries = [s.admit(f"r{i}-{j}", 300, limits) for i in range(10) for j, s in enumerate((one, two))]
            admitted = sum(await asyncio.gather(*tries))
            assert admitted == 3  # 3 x 300 fit in 1000, a fourth does not: on either replica
            assert (await one.snapshot()).prefill_tokens == 900

    run(go)


def test_release_is_once_and_only_ones_own(backend: Callable[[Settings], Make]) -> None:
    make = backend(Settings(min_hold_s=0.0))

    async def go() -> None:
        async with opened(make) as (one, two):
            assert await one.admit("same-id", 400, OPEN)
            assert await two.admit("same-id", 100, OPEN)  # the same id on another replica: its own charge
            await two.release("same-id")
            await two.release("same-id")  # twice: a no-op
            await two.release("never-charged")
            assert (await one.snapshot()).prefill_tokens == (400 if one is not two else 0)
            await one.release("same-id")
            assert (await two.snapshot()).prefill_tokens == 0

    run(go)


def test_the_hold_keeps_a_flag_on_after_its_last_lease(backend: Callable[[Settings], Make]) -> None:
    make = backend(Settings(min_hold_s=60.0))

    async def go() -> None:
        async with opened(make) as (one, two):
            await one.hold("maintenance", "admin", None)
            await two.drop("maintenance", "admin")  # a flap inside the hold
            state = await two.state()
            assert state.maintenance.on and state.maintenance.held_for_s is not None
            assert 50 < state.maintenance.held_for_s <= 60
            assert not state.realtime.on and state.realtime.held_for_s is None

    run(go)


@pytest.mark.parametrize("kind", ["memory", "host"])
def test_leases_end_on_the_stores_clock(kind: str, tmp_path: Path) -> None:
    clock, settings = Clock(), Settings(min_hold_s=5.0)
    path = str(tmp_path / "state")
    reset_host_store(path)
    make = (lambda: HostStore(path, settings, clock)) if kind == "host" else (lambda: MemoryStore(settings, clock))

    async def go() -> list[bool]:
        store = make()
        seen = []
        await store.hold("realtime", "voice", 30)
        clock.now += 29.9
        seen.append((await store.snapshot()).realtime)
        await store.hold("realtime", "voice", 30)  # renewed: 30 s from now
        clock.now += 29.9
        seen.append((await store.snapshot()).realtime)
        clock.now += 0.1
        seen.append((await store.snapshot()).realtime)  # not renewed: over
        await store.hold("realtime", "voice", 30)
        await store.drop("realtime", "voice")
        seen.append((await store.snapshot()).realtime)  # inside the hold
        clock.now += 5
        seen.append((await store.snapshot()).realtime)
        await store.close()
        return seen

    assert run(go) == [True, True, False, True, False]


@pytest.mark.parametrize("tokens", [-1, -(10**9), True, 2.5])
def test_a_charge_is_a_count_of_tokens(backend: Callable[[Settings], Make], tokens: Any) -> None:
    """A negative charge would make room for other requests: refused, nothing charged."""
    make = backend(Settings(min_hold_s=0.0))

    async def go() -> None:
        async with opened(make, 1) as (one,):
            assert await one.admit("a", 500, OPEN)
            with pytest.raises(ValueError):
                await one.admit("b", tokens, OPEN)
            assert (await one.snapshot()).prefill_tokens == 500

    run(go)
