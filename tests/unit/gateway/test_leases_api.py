"""The lease API, called in-process (a Request straight into the Router): typed bodies (a boolean is not a TTL, a
lease id is short and printable), sessions' leases independent and listed, a bound past which a new lease is a
409, and a store that cannot be reached: lease calls a 503 with Retry-After, /readyz and the admin answers say
degraded and why, completions still answered (never a 5xx from the store)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from servelab.gateway import GatewayConfig, Router
from servelab.gateway.app import Gateway
from servelab.gateway.config import Keys, Policy, State, Upstream
from servelab.gateway.server import Request, Response
from servelab.testing import free_port
from tests.fixtures.hostile_peers import tokenizer_folder

ADMIN = {b"authorization": b"Bearer admin-key"}


def _config(**state: Any) -> GatewayConfig:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: no upstream is reachable
    return GatewayConfig(
        port=0,
        local=Upstream(url=closed, connect_timeout_s=1, read_timeout_s=2, tokenizer=tokenizer_folder()),
        policy=Policy(health_interval_s=30, keepalive_s=0, min_hold_s=0),
        keys=Keys(admin=["admin-key"]),
        state=State(**state),
    )


def _ask(config: GatewayConfig, *calls: tuple[str, str, object]) -> list[Response]:
    async def go() -> list[Response]:
        gateway = Gateway(config)
        await gateway.start()
        try:
            router, answers = Router(gateway), []
            for method, path, body in calls:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
                answer = await router(Request(method, path, b"", dict(ADMIN), raw))
                assert isinstance(answer, Response)
                answers.append(answer)
            return answers
        finally:
            await gateway.stop()

    return asyncio.run(go())


@pytest.mark.parametrize(
    "body",
    [{"active": True, "ttl_s": True}, {"active": True, "ttl_s": False}, {"active": 1}, {"active": "true"},
     {"active": True, "ttl_s": "30"}, {"active": True, "lease": ""}, {"active": True, "lease": "a b"},
     {"active": True, "lease": "x" * 65}, {"active": True, "lease": 7}, {"active": True, "lease": "voice\u0000"},
     {"active": True, "lease": "-x"}, {"active": True, "ttl_s": 10**9}, {"active": True, "owner": "me"}],
)  # fmt: skip
def test_lease_bodies_are_typed(body: object) -> None:
    refused, state = _ask(_config(), ("POST", "/admin/realtime", body), ("GET", "/admin/state", None))
    assert refused.status == 400, refused.body
    assert json.loads(state.body)["realtime"] is False


def test_maintenance_takes_no_lease_or_ttl() -> None:
    answers = _ask(_config(), ("POST", "/admin/maintenance", {"active": True, "ttl_s": 5}),
                   ("POST", "/admin/maintenance", {"active": True, "lease": "x"}))  # fmt: skip
    assert [a.status for a in answers] == [400, 400]


def test_two_sessions_leases_are_independent_and_listed() -> None:
    answers = _ask(
        _config(),
        ("POST", "/admin/realtime", {"active": True, "lease": "voice-a", "ttl_s": 60}),
        ("POST", "/admin/realtime", {"active": True, "lease": "voice-b", "ttl_s": 1}),
        ("POST", "/admin/realtime", {"active": False, "lease": "voice-b"}),
        ("POST", "/admin/realtime", {"active": True, "ttl_s": 30}),  # the old body: the default lease
        ("GET", "/admin/realtime", None),
    )
    assert all(a.status == 200 for a in answers)
    state = json.loads(answers[-1].body)
    assert state["realtime"] is True
    assert sorted(v["lease"] for v in state["realtime_leases"]) == ["default", "voice-a"]
    voice = next(v for v in state["realtime_leases"] if v["lease"] == "voice-a")
    assert 50 < voice["expires_in_s"] <= 60 and voice["owner"]
    assert state["realtime_lease_until"] >= voice["until"] and state["state_degraded"] is None


def test_past_the_bound_a_new_lease_is_a_409_and_a_renewal_passes() -> None:
    answers = _ask(
        _config(max_leases=2),
        ("POST", "/admin/realtime", {"active": True, "lease": "a"}),
        ("POST", "/admin/realtime", {"active": True, "lease": "b"}),
        ("POST", "/admin/realtime", {"active": True, "lease": "c"}),
        ("POST", "/admin/realtime", {"active": True, "lease": "a", "ttl_s": 5}),
    )
    assert [a.status for a in answers] == [200, 200, 409, 200]
    assert json.loads(answers[2].body)["error"]["type"] == "too_many_leases"


def test_a_store_that_cannot_be_reached_degrades_and_never_answers_5xx_of_its_own() -> None:
    """Redis at a port nothing listens on: lease calls 503 with Retry-After; the state, /readyz and a completion
    are answered (the completion's 503 is the closed upstream's: no backend, not the store)."""
    config = _config(backend="redis", redis_url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    lease, drop, state, ready, answer = _ask(
        config,
        ("POST", "/admin/realtime", {"active": True, "lease": "voice"}),
        ("POST", "/admin/realtime", {"active": False, "lease": "voice"}),
        ("GET", "/admin/state", None),
        ("GET", "/readyz", None),
        ("POST", "/v1/chat/completions", chat),
    )
    for refused in (lease, drop):
        assert refused.status == 503 and json.loads(refused.body)["error"]["type"] == "state_unavailable"
        assert int(dict(refused.headers)["retry-after"]) >= 1
    seen = json.loads(state.body)
    assert state.status == 200 and seen["realtime"] is True and "redis" in seen["state_degraded"]
    readiness = json.loads(ready.body)
    assert readiness["degraded"] is True and "redis" in readiness["state_degraded"]
    assert answer.status == 503 and json.loads(answer.body)["error"]["type"] == "no_backend"
