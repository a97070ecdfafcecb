"""A client that hangs up while the gateway is sending keep-alive comments (the upstream is still silent in a
long prefill) cancels the upstream request on the real embedded vLLM (its running-requests gauge back to 0,
far fewer tokens generated than asked) and gives the prefill budget back, in memory and in Redis; so do the
other ways out. Worker processes on one port share the host store."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest

from servelab.engines.embedded import EngineState
from servelab.gateway.config import State
from servelab.gateway.store import RedisStore
from tests.integration.test_gateway import CHAT, config, engine_metric, free_port, serve, wait_idle

LONG = [{"role": "user", "content": "x1 " * 2300}]  # several seconds of prefill on this CPU engine


async def redis_prefill(url: str, prefix: str) -> int:
    store = RedisStore(url, prefix)
    try:
        return (await store.snapshot()).prefill_tokens
    finally:
        await store.close()


def hang_up_during_keepalive(url: str) -> bytes:
    body = dict(CHAT, messages=LONG, stream=True, max_tokens=400, ignore_eos=True)
    with httpx.Client(base_url=url, timeout=30) as http, http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        first = next(r.iter_bytes())
    return first  # the connection closes here, while the upstream is still silent


def test_a_hang_up_during_keepalive_cancels_the_upstream_and_frees_the_budget(engine: EngineState) -> None:
    with serve(config(engine.url, None, keepalive_s=0.3)) as (url, gateway):
        before = engine_metric(engine, "vllm:generation_tokens_total")
        assert hang_up_during_keepalive(url).startswith(b": keep-alive")
        assert wait_idle(engine, url), "the upstream request kept running after the client left"
        assert asyncio.run(gateway.store.snapshot()).prefill_tokens == 0
        assert engine_metric(engine, "vllm:generation_tokens_total") - before < 400


@pytest.mark.skipif(shutil.which("redis-server") is None and not os.environ.get("CI"), reason="no redis-server")
def test_the_redis_budget_is_given_back_too(engine: EngineState) -> None:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
                            stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        time.sleep(0.5)
        cfg = config(engine.url, None, keepalive_s=0.3)
        cfg.state = State(backend="redis", redis_url=f"redis://127.0.0.1:{port}/0", prefix=f"t{port}:")
        with serve(cfg) as (url, _):
            hang_up_during_keepalive(url)
            assert wait_idle(engine, url)
        assert asyncio.run(redis_prefill(cfg.state.redis_url, cfg.state.prefix)) == 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_workers_share_one_port_and_one_state(engine: EngineState, tmp_path: object) -> None:
    """Three worker processes (SO_REUSEPORT) behind one port: a flag set through one is seen by all."""
    port = free_port()
    cfg = config(engine.url, None).model_copy(update={"port": port})
    code = ("import sys\nfrom servelab.gateway import GatewayConfig, run\n"
            "run(GatewayConfig.model_validate_json(sys.argv[1]), 3)\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, cfg.model_dump_json()])
    admin = {"Authorization": "Bearer admin-key"}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        on = httpx.post(f"http://127.0.0.1:{port}/admin/maintenance", json={"active": True}, headers=admin)
        assert on.status_code == 200 and on.json()["maintenance"]
        seen = [httpx.get(f"http://127.0.0.1:{port}/admin/state", headers=admin).json()["maintenance"]
                for _ in range(30)]  # fresh connections: the kernel spreads them over the workers  # fmt: skip
        assert all(seen)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "servelab_gateway_flag" in metrics
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode is not None
