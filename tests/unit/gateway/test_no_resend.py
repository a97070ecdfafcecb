"""A request the upstream may have taken is never sent to it again (tests/fixtures/hostile_peers.py: a FIXTURE
upstream, since no real engine reads a request and then drops its connection on demand). The gateway fails over
to the other upstream, as the one failover allowed before the first byte does, or fails with a clear error; the
pool-level rule is in test_upstream_pool.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from servelab.gateway import running
from tests.fixtures.hostile_peers import HostileUpstream, hostile_upstream, url
from tests.unit.gateway.test_hardening import AUTH, CHAT, config


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with hostile_upstream() as up:
        yield up


@pytest.mark.parametrize("external", [True, False])
def test_a_request_read_and_dropped_is_never_sent_to_that_upstream_again(
    upstream: HostileUpstream, external: bool
) -> None:
    """Local answers the first request on each connection and drops the second after reading it whole. Every
    request the gateway sent local is read by local once (no two bodies alike); one it dropped is answered by
    external (failed over) or is a 503 that says it was sent and not sent again."""
    cfg = config(url(upstream, "dropsecond"), url(upstream, "ok") if external else None)
    upstream.bodies.pop("dropsecond", None)
    replies = []
    with running(cfg) as (base, _), httpx.Client(base_url=base, headers=AUTH, timeout=10) as http:
        for n in range(6):
            body = {**CHAT, "stream": n % 2 == 0, "user": f"request-{n}"}
            replies.append(http.post("/v1/chat/completions", json=body))
    taken = [json.loads(b)["user"] for b in upstream.bodies["dropsecond"]]
    assert len(taken) == len(set(taken)), f"local was sent a request twice: {taken}"
    dropped = [r for r in replies if r.headers["x-servelab-route"] != "local"]
    assert dropped, "the fixture dropped no request: the test tested nothing"
    for reply in dropped:
        if external:
            assert reply.status_code == 200 and reply.headers["x-servelab-reason"] == "failover_from_local"
        else:
            assert reply.status_code == 503 and "not sent to it again" in reply.json()["error"]["message"]
            assert reply.headers["x-should-retry"] == "false"
