"""Two gateway replicas agree on realtime and maintenance through a real redis-server (Debian package, started
here), and share one in-flight prefill budget."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from servelab.gateway.config import GatewayConfig, Keys, Policy, State, Upstream
from servelab.gateway.store import Limits, RedisStore
from tests.integration.test_gateway import ADMIN, free_port, serve

if shutil.which("redis-server") is None:
    if os.environ.get("CI"):
        pytest.fail("redis-server is missing; `make test` installs it", pytrace=False)
    pytest.skip("redis-server is not installed (apt-get install redis-server)", allow_module_level=True)


@pytest.fixture()
def redis_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def replica(redis: str, min_hold: float = 0.0) -> GatewayConfig:
    return GatewayConfig(
        local=Upstream(url=f"http://127.0.0.1:{free_port()}"),
        policy=Policy(min_hold_s=min_hold, health_interval_s=5),
        keys=Keys(admin=["admin-key"]),
        state=State(backend="redis", redis_url=redis, prefix="test:"),
    )


def test_two_replicas_agree_through_redis(redis_url: str) -> None:
    with (
        serve(replica(redis_url)) as (a, _),
        serve(replica(redis_url)) as (b, _),
        httpx.Client(base_url=a) as first,
        httpx.Client(base_url=b) as second,
    ):
        assert not second.get("/admin/state", headers=ADMIN).json()["realtime"]
        first.post("/admin/realtime", json={"active": True, "ttl_s": 1.0}, headers=ADMIN)
        assert second.get("/admin/state", headers=ADMIN).json()["realtime"]
        second.post("/admin/maintenance", json={"active": True}, headers=ADMIN)
        assert first.get("/admin/state", headers=ADMIN).json()["maintenance"]
        time.sleep(1.2)  # the lease was not renewed: both see it end
        assert not first.get("/admin/state", headers=ADMIN).json()["realtime"]
        assert not second.get("/admin/state", headers=ADMIN).json()["realtime"]


def test_hold_time_and_shared_prefill_budget(redis_url: str) -> None:
    with (
        serve(replica(redis_url, min_hold=30)) as (a, _),
        serve(replica(redis_url, min_hold=30)) as (b, _),
        httpx.Client(base_url=a) as first,
        httpx.Client(base_url=b) as second,
    ):
        first.post("/admin/maintenance", json={"active": True}, headers=ADMIN)
        second.post("/admin/maintenance", json={"active": False}, headers=ADMIN)  # a flap inside the hold
        assert first.get("/admin/state", headers=ADMIN).json()["maintenance"]

    async def budget() -> tuple[int, int]:
        one, two = RedisStore(redis_url, "budget:"), RedisStore(redis_url, "budget:")
        limits = Limits(threshold=10_000, budget=10_000)
        await one.admit("a", 3000, limits)
        await two.admit("b", 5000, limits)
        seen = (await one.snapshot()).prefill_tokens
        await one.release("a")
        left = (await two.snapshot()).prefill_tokens
        await one.close()
        await two.close()
        return seen, left

    assert asyncio.run(budget()) == (8000, 5000)
