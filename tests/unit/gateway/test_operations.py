"""The gateway for its operator: /readyz ready only while a route can serve (local up and not in maintenance, or an
external API that can be reached), the admin answers saying until when a flag is held, one JSON access line per
request, and start-up warnings for a key variable not set or an upstream that cannot be reached. The upstreams
are closed ports (nothing listens): what is tested is what the gateway says of them."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import httpx
import pytest

from servelab.gateway import GatewayConfig, Router, running
from servelab.gateway.app import Gateway
from servelab.gateway.checks import startup_warnings
from servelab.gateway.config import Keys, Policy, Server, Upstream
from servelab.gateway.server import Request, Response
from servelab.testing import free_port

ADMIN = {b"authorization": b"Bearer admin-key"}


def _config(*, external: str | None = None, key_env: str | None = None) -> GatewayConfig:
    closed = f"http://127.0.0.1:{free_port()}"
    return GatewayConfig(
        port=0,
        local=Upstream(url=closed, health_path="/health", connect_timeout_s=0.5, read_timeout_s=1),
        external=Upstream(url=external, api_key_env=key_env, connect_timeout_s=0.5) if external else None,
        policy=Policy(health_interval_s=0.05, health_timeout_s=0.5, unhealthy_after=1, min_hold_s=60, keepalive_s=0),
        keys=Keys(admin=["admin-key"]),
    )


def _after_checks(config: GatewayConfig, *requests: Request) -> list[Response]:
    async def go() -> list[Response]:
        gateway = Gateway(config)
        await gateway.start()
        try:
            await asyncio.sleep(0.4)  # the health checks have run
            router = Router(gateway)
            return [await router(r) for r in requests]  # type: ignore[misc]
        finally:
            await gateway.stop()

    return asyncio.run(go())


def _get(path: str) -> Request:
    return Request("GET", path, b"", dict(ADMIN))


def test_not_ready_when_no_route_can_serve() -> None:
    unresolvable = "http://no-such-host.invalid:443"
    (ready,) = _after_checks(_config(external=unresolvable), _get("/readyz"))
    state = json.loads(ready.body)
    assert ready.status == 503 and state["ready"] is False
    assert state["local_healthy"] is False and state["external"] is True and state["external_reachable"] is False
    assert state["external_last_error"] and "no-such-host.invalid" in state["external_last_error"]


def test_ready_on_an_external_api_that_answers() -> None:
    async def go() -> Response:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)  # a port that answers
        port = server.sockets[0].getsockname()[1]
        try:
            config = _config(external=f"http://127.0.0.1:{port}")
            gateway = Gateway(config)
            await gateway.start()
            try:
                await asyncio.sleep(0.4)
                answer = await Router(gateway)(_get("/readyz"))
                assert isinstance(answer, Response)
                return answer
            finally:
                await gateway.stop()
        finally:
            server.close()

    ready = asyncio.run(go())
    state = json.loads(ready.body)
    assert ready.status == 200 and state["ready"] is True and state["local_healthy"] is False
    assert state["external_reachable"] is True and state["external_last_error"] is None


def test_a_flag_asked_off_inside_its_hold_says_until_when() -> None:
    on, off = (Request("POST", "/admin/maintenance", b"", dict(ADMIN), json.dumps({"active": a}).encode())
               for a in (True, False))  # fmt: skip
    before = time.time()
    _, held = _after_checks(_config(), on, off)
    state = json.loads(held.body)
    assert state["maintenance"] is True  # still on: it went on less than min_hold_s (60 s) ago
    assert before + 60 <= state["maintenance_held_until"] <= time.time() + 60
    assert state["realtime_held_until"] is None and state["realtime_lease_until"] is None


def test_one_json_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="servelab.gateway.access")
    config = _config()
    with running(config) as (url, _):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)
        missing = httpx.get(f"{url}/nothing", timeout=10)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "servelab.gateway.access"]
    assert answer.status_code == 503 and missing.status_code == 404
    chat = next(line for line in lines if line["path"] == "/v1/chat/completions")
    assert chat["status"] == 503 and chat["route"] == "none" and chat["reason"] == answer.headers["x-servelab-reason"]
    assert chat["method"] == "POST" and chat["failed_over"] is False and chat["ms"] >= 0
    assert any(line["path"] == "/nothing" and line["status"] == 404 for line in lines)


def test_start_up_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVELAB_TEST_NO_SUCH_KEY", raising=False)
    config = _config(external=f"http://127.0.0.1:{free_port()}", key_env="SERVELAB_TEST_NO_SUCH_KEY")
    said = asyncio.run(startup_warnings(config))
    assert any("local upstream cannot be reached" in w for w in said)
    assert any("external upstream cannot be reached" in w for w in said)
    assert any("SERVELAB_TEST_NO_SUCH_KEY is not set" in w for w in said)


SERVE = """
import sys
from servelab.gateway import GatewayConfig, run
run(GatewayConfig.model_validate_json(sys.argv[1]))
"""


def test_a_stderr_nobody_reads_does_not_stall_the_gateway() -> None:
    """The gateway as its own process with stderr a pipe that is not read (a stalled log collector): 3,000
    answered requests are ~600 KB of access log, ten times what the pipe holds (the gateway used to stop
    answering after ~300 of them). Every one is answered; past the 200 lines it holds it drops lines, and says
    so when the pipe is read again."""
    import subprocess
    import sys

    port = free_port()
    config = _config().model_copy(update={"port": port, "server": Server(log_queue_lines=200)})
    gateway = subprocess.Popen([sys.executable, "-c", SERVE, config.model_dump_json()], stderr=subprocess.PIPE)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    http.get("/healthz")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the gateway did not start"
                    time.sleep(0.1)
            statuses = [http.get(f"/no/such/path/{'x' * 100}/{i}").status_code for i in range(3000)]
            alive = http.get("/healthz").status_code
    finally:
        gateway.terminate()
        said = gateway.communicate(timeout=30)[1].decode()
    assert statuses == [404] * 3000 and alive == 200
    assert "log lines dropped (stderr was not read)" in said
