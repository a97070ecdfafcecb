"""Gateway replicas sharing their state through a real redis-server, under load: Redis stopped, frozen (SIGSTOP)
and restarted with no 5xx from a gateway; two voice sessions' leases independent; a replica killed with -9 (a
real process holding charges against a slow upstream) whose charges end with their TTL; a replica whose wall
clock is 40 s off that neither ends nor extends a lease. Every wait is on a condition, with a generous deadline."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx
import pytest

from servelab.gateway import running
from servelab.gateway.config import GatewayConfig, Keys, Policy, State, Upstream
from servelab.gateway.store import RedisStore, settings
from servelab.testing import free_port, loop_in_thread
from tests.fixtures.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]
ADMIN = {"Authorization": "Bearer admin-key"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
DEADLINE_S = 60.0
ANSWER = b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}'


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@contextmanager
def upstream(delay_s: float = 0.0) -> Iterator[str]:
    """A local engine stand-in: /health answers at once, a completion after ``delay_s``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                await reader.readexactly(length)
                if head.startswith(b"POST") and delay_s:
                    await asyncio.sleep(delay_s)
                body = ANSWER if head.startswith(b"POST") else b"{}"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))  # fmt: skip
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(handle, "127.0.0.1", 0)

    with loop_in_thread(start) as server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def replica(redis: str, local: str, **state: Any) -> GatewayConfig:
    return GatewayConfig(
        local=Upstream(url=local, connect_timeout_s=2, read_timeout_s=120),
        policy=Policy(min_hold_s=0.0, health_interval_s=0.2, keepalive_s=0),
        keys=Keys(admin=["admin-key"]),
        state=State(backend="redis", redis_url=redis, prefix="it:", timeout_s=0.25, retry_s=0.2, **state),
        port=0,
    )


@contextmanager
def two_replicas(redis: str) -> Iterator[tuple[str, str]]:
    with upstream() as local, running(replica(redis, local)) as (a, _), running(replica(redis, local)) as (b, _):
        yield a, b


def state(url: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{url}/admin/state", headers=ADMIN, timeout=30).json()
    return answer


class Load:
    """Completions sent to each replica in a loop, every status kept."""

    def __init__(self, urls: list[str]) -> None:
        self.statuses: list[list[int]] = [[] for _ in urls]
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._send, args=(u, s), daemon=True)
                        for u, s in zip(urls, self.statuses, strict=True)]  # fmt: skip
        for thread in self.threads:
            thread.start()

    def _send(self, url: str, into: list[int]) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while not self.stop.is_set():
                into.append(http.post("/v1/chat/completions", json=CHAT).status_code)

    def more(self, count: int) -> None:
        """Wait until every replica has answered ``count`` more requests."""
        marks = [len(s) for s in self.statuses]
        wait_for(lambda: all(len(s) >= m + count for s, m in zip(self.statuses, marks, strict=True)),
                 "a replica stopped answering")  # fmt: skip

    def end(self) -> list[int]:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=DEADLINE_S)
        return [code for s in self.statuses for code in s]


def test_redis_stopped_frozen_and_restarted_under_load_no_5xx(redis_server: RedisServer) -> None:
    with two_replicas(redis_server.url) as (a, b):
        httpx.post(f"{a}/admin/realtime", json={"active": True, "lease": "voice", "ttl_s": 60}, headers=ADMIN)
        load = Load([a, b])
        try:
            load.more(5)
            redis_server.stop()
            load.more(20)
            wait_for(lambda: state(a)["state_degraded"] is not None, "replica a did not say it is degraded")
            assert httpx.get(f"{b}/readyz", timeout=30).json()["degraded"] is True
            renewal = httpx.post(f"{a}/admin/realtime", json={"active": True, "lease": "voice"}, headers=ADMIN)
            assert renewal.status_code == 503 and int(renewal.headers["retry-after"]) >= 1
            redis_server.start()
            wait_for(lambda: all(state(u)["state_degraded"] is None for u in (a, b)), "no recovery after restart")
            load.more(5)
            redis_server.freeze()
            try:
                load.more(20)
                assert state(b)["state_degraded"] is not None and state(b)["realtime"] is True
            finally:
                redis_server.thaw()
            wait_for(lambda: all(state(u)["state_degraded"] is None for u in (a, b)), "no recovery after thaw")
            load.more(5)
        finally:
            statuses = load.end()
        assert statuses and all(code < 500 for code in statuses), sorted(set(statuses))
        wait_for(lambda: state(a)["local_prefill_tokens"] == 0, "charges were left counted after the load")


def test_two_sessions_leases_are_independent_across_replicas(redis_server: RedisServer) -> None:
    with two_replicas(redis_server.url) as (a, b):
        httpx.post(f"{a}/admin/realtime", json={"active": True, "lease": "voice-a", "ttl_s": 60}, headers=ADMIN)
        httpx.post(f"{b}/admin/realtime", json={"active": True, "lease": "voice-b", "ttl_s": 1}, headers=ADMIN)
        httpx.post(f"{b}/admin/realtime", json={"active": False, "lease": "voice-b"}, headers=ADMIN)
        httpx.post(f"{b}/admin/realtime", json={"active": True, "lease": "voice-b", "ttl_s": 1}, headers=ADMIN)
        wait_for(lambda: [v["lease"] for v in state(a)["realtime_leases"]] == ["voice-a"], "voice-b never ended")
        for url in (a, b):
            seen = state(url)
            assert seen["realtime"] is True and seen["realtime_leases"][0]["expires_in_s"] > 30


SUBPROCESS = """
import sys
from servelab.gateway import GatewayConfig, run
run(GatewayConfig.model_validate_json(sys.argv[1]))
"""


def test_a_replica_killed_with_9_loses_its_charges_within_their_ttl(redis_server: RedisServer) -> None:
    with upstream(delay_s=120) as slow, running(replica(redis_server.url, slow)) as (live, _):
        port = free_port()
        config = replica(redis_server.url, slow, charge_ttl_s=2.0).model_copy(update={"port": port})
        proc = subprocess.Popen([sys.executable, "-c", SUBPROCESS, config.model_dump_json()],
                                stderr=subprocess.DEVNULL)  # fmt: skip
        doomed = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _answers(doomed), "the replica did not start")
            for _ in range(3):  # held at the slow upstream: their charges stay counted
                threading.Thread(target=_ignore, args=(doomed,), daemon=True).start()
            wait_for(lambda: state(live)["local_prefill_tokens"] > 0, "the charges never showed")
        finally:
            proc.kill()
            proc.wait(timeout=30)
        wait_for(lambda: state(live)["local_prefill_tokens"] == 0, "a killed replica's charges outlived their TTL")


def test_a_replica_40_s_off_neither_ends_nor_extends_a_lease(redis_server: RedisServer) -> None:
    def skewed(by: float) -> tuple[GatewayConfig, RedisStore]:
        config = replica(redis_server.url, local)
        return config, RedisStore(redis_server.url, "it:", settings(config), wall=lambda: time.time() + by)

    with upstream() as local, running(*skewed(40.0)) as (fast, _), running(*skewed(-40.0)) as (slow, _):
        httpx.post(f"{fast}/admin/realtime", json={"active": True, "lease": "voice", "ttl_s": 30}, headers=ADMIN)
        for url in (fast, slow):
            seen = state(url)
            assert seen["realtime"] is True and 25 < seen["realtime_leases"][0]["expires_in_s"] <= 30
        until = [state(url)["realtime_leases"][0]["until"] for url in (fast, slow)]
        assert 70 < until[0] - until[1] < 90  # each says it on its own clock; neither decides on it
        httpx.post(f"{slow}/admin/realtime", json={"active": True, "lease": "voice", "ttl_s": 1}, headers=ADMIN)
        assert state(fast)["realtime_leases"][0]["expires_in_s"] <= 1  # renewed for 1 s, not 1 s + 40 s
        wait_for(lambda: not state(fast)["realtime"] and not state(slow)["realtime"], "the 1 s lease never ended")


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _ignore(url: str) -> None:
    with suppress(httpx.HTTPError):
        httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=150)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
