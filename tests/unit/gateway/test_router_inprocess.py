"""The gateway's routes called in-process (a Request object straight into the Router, no socket): what it answers
before any upstream is tried (keys, bodies, admin flags, unknown paths and methods) and what it says of the
routes it can serve. Beside the real-server tests (tests/integration/test_gateway*.py, the hostile peers of
tests/unit/gateway/test_hardening.py), which keep the socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from servelab.gateway import GatewayConfig, Router
from servelab.gateway.app import Gateway
from servelab.gateway.config import Keys, Policy, Upstream
from servelab.gateway.server import Request, Response
from servelab.testing import free_port

CLIENT, ADMIN = {b"authorization": b"Bearer client-key"}, {b"authorization": b"Bearer admin-key"}


def _config(external: bool = False) -> GatewayConfig:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: no upstream is reachable
    return GatewayConfig(
        port=0,
        local=Upstream(url=closed, health_path="/v1/models", connect_timeout_s=1, read_timeout_s=2),
        external=Upstream(url=closed, connect_timeout_s=1, read_timeout_s=2) if external else None,
        policy=Policy(health_interval_s=30, keepalive_s=0),
        keys=Keys(clients=["client-key"], admin=["admin-key"]),
    )


@pytest.fixture()
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _ask(loop: asyncio.AbstractEventLoop, config: GatewayConfig, *requests: Request) -> list[Response]:
    async def go() -> list[Response]:
        gateway = Gateway(config)
        await gateway.start()
        try:
            router = Router(gateway)
            answers = [await router(r) for r in requests]
        finally:
            await gateway.stop()
        assert all(isinstance(a, Response) for a in answers)
        return answers  # type: ignore[return-value]

    return loop.run_until_complete(go())


def req(method: str, path: str, body: bytes = b"", headers: dict[bytes, bytes] | None = None) -> Request:
    return Request(method, path, b"", dict(headers or {}), body)


def _error(answer: Response) -> tuple[int, str]:
    return answer.status, json.loads(answer.body)["error"]["type"]


def test_what_is_answered_before_any_upstream_is_tried(loop: asyncio.AbstractEventLoop) -> None:
    chat = b'{"model": "m", "messages": [], "temperature": NaN}'
    answers = _ask(
        loop,
        _config(),
        req("POST", "/v1/chat/completions", b"{}"),  # no key
        req("POST", "/v1/chat/completions", chat, CLIENT),
        req("POST", "/v1/chat/completions", b"[" * 5000 + b"]" * 5000, CLIENT),
        req("GET", "/v1/chat/completions", b"", CLIENT),
        req("GET", "/nothing/here"),
        req("POST", "/admin/realtime", b'{"active": "false"}', ADMIN),
        req("POST", "/admin/realtime", b'{"active": true, "ttl_s": 0}', ADMIN),
        req("POST", "/admin/realtime", b'{"active": true}', CLIENT),
        req("GET", "/admin/nope", b"", ADMIN),
    )
    assert [_error(a) for a in answers] == [
        (401, "authentication_error"),
        (400, "invalid_request_error"),
        (400, "invalid_request_error"),
        (405, "invalid_request_error"),
        (404, "not_found"),
        (400, "invalid_request_error"),
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found"),
    ]


def test_admin_flags_and_readiness_in_process(loop: asyncio.AbstractEventLoop) -> None:
    on, state, ready, models = _ask(
        loop,
        _config(),
        req("POST", "/admin/maintenance", b'{"active": true}', ADMIN),
        req("GET", "/admin/state", b"", ADMIN),
        req("GET", "/readyz", b"", ADMIN),
        req("GET", "/v1/models", b"", CLIENT),
    )
    assert on.status == 200 and json.loads(on.body)["maintenance"] is True
    assert json.loads(state.body)["maintenance"] is True
    assert ready.status == 503 and json.loads(ready.body)["ready"] is False  # maintenance on, no external
    assert _error(models) == (503, "no_backend")


def test_no_reachable_upstream_is_a_503_that_says_so(loop: asyncio.AbstractEventLoop) -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    (answer,) = _ask(loop, _config(external=True), req("POST", "/v1/chat/completions", body, CLIENT))
    assert _error(answer) == (503, "no_backend")
    message = json.loads(answer.body)["error"]["message"]
    assert "local: cannot connect" in message and "external: cannot connect" in message  # one failover, both said
    assert dict(answer.headers)["x-should-retry"] == "false" and dict(answer.headers)["retry-after"] == "5"


def test_an_admission_the_store_refuses_after_the_policy_let_it_is_shed_with_429(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A store that refuses every admission (an ADVERSARY standing in for a race a real store cannot be made to
    lose on demand: the budget taken between the snapshot and the charge): the request is shed like the policy
    sheds it (429, realtime_prefill_budget, Retry-After), not answered 503 as if no backend could serve."""
    from servelab.gateway.store import Limits, MemoryStore
    from tests.fixtures.hostile_peers import tokenizer_folder

    class Refusing(MemoryStore):
        async def admit(self, request: str, tokens: int, limits: Limits) -> bool:
            return False

    config = _config()
    config.local.tokenizer = tokenizer_folder()
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()

    async def go() -> Response:
        gateway = Gateway(config, store=Refusing())
        await gateway.start()
        try:
            answer = await Router(gateway)(req("POST", "/v1/chat/completions", body, CLIENT))
        finally:
            await gateway.stop()
        assert isinstance(answer, Response)
        return answer

    answer = loop.run_until_complete(go())
    headers = dict(answer.headers)
    assert (answer.status, headers["x-servelab-reason"], headers["retry-after"]) == (
        429,
        "realtime_prefill_budget",
        "10",
    )
