"""Generated sequences of concurrent admissions and releases across two stores sharing one state (two replicas on
one Redis, two workers on one host file): while realtime is on, the tokens admitted and not given back never
exceed the budget, whatever the interleaving, and the store's total is exactly what is in flight (nothing
counted twice, nothing lost, a release twice or of an unknown id a no-op)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.gateway.store import HostStore, Limits, RedisStore, Settings, Store, reset_host_store
from tests.fixtures.redis_server import RedisServer, need_redis

LIMITS = Limits(threshold=600, budget=1000)
STORE = Settings(min_hold_s=0.0, charge_ttl_s=120.0, timeout_s=30.0)  # about the budget, not Redis's speed
_prefixes = itertools.count()

# one step: admissions (replica, tokens) sent at once, then releases (an index into what is held; some twice)
steps = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 1), st.integers(1, 700)), min_size=1, max_size=8),
        st.lists(st.integers(0, 30), max_size=4),
    ),
    min_size=1,
    max_size=6,
)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    need_redis()
    server = RedisServer()
    server.start()
    yield server.url
    server.stop()


def check(make: Callable[[], Store], plan: list[tuple[list[tuple[int, int]], list[int]]]) -> None:
    async def go() -> None:
        stores = [make(), make()]
        try:
            await stores[0].hold("realtime", "voice", 600)
            held: list[tuple[int, str, int]] = []  # (replica, request, tokens) admitted, not given back
            ids = itertools.count()
            for admits, releases in plan:
                named = [(i, f"r{next(ids)}", n) for i, n in admits]
                got = await asyncio.gather(*(stores[i].admit(rid, n, LIMITS) for i, rid, n in named))
                held += [charge for charge, ok in zip(named, got, strict=True) if ok]
                assert sum(n for *_, n in held) <= LIMITS.budget
                for pick in releases:
                    if held:
                        i, rid, _ = held.pop(pick % len(held))
                        await stores[i].release(rid)
                        await stores[i].release(rid)  # twice: a no-op
                        await stores[1 - i].release(rid)  # not its own: a no-op
                seen = await stores[0].snapshot()
                assert seen.degraded is None and seen.prefill_tokens == sum(n for *_, n in held)
        finally:
            for store in stores:
                await store.close()

    asyncio.run(go())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_two_replicas_on_one_redis_never_pass_the_budget_together(
    redis_url: str, plan: list[tuple[list[tuple[int, int]], list[int]]]
) -> None:
    prefix = f"h{next(_prefixes)}:"
    check(lambda: RedisStore(redis_url, prefix, STORE), plan)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_two_workers_on_one_host_file_never_pass_the_budget_together(
    tmp_path: Path, plan: list[tuple[list[tuple[int, int]], list[int]]]
) -> None:
    path = str(tmp_path / f"state{next(_prefixes)}")
    reset_host_store(path)
    check(lambda: HostStore(path, STORE), plan)
