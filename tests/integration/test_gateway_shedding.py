"""Gateway answers without any upstream to reach: shedding (429) against nothing to serve (503)."""

from __future__ import annotations

import httpx

from servelab.gateway.config import GatewayConfig, Keys, Policy, Upstream
from tests.fixtures.hostile_peers import tokenizer_folder
from tests.integration.test_gateway import ADMIN, free_port, serve


def test_shedding_is_429_and_nothing_to_serve_is_503() -> None:
    """No external API: a long prompt while realtime is active is shed (local could, the policy keeps it free);
    a short one (counted in process: a down engine cannot count it) goes local, which is down: 503."""
    config = GatewayConfig(
        local=Upstream(url=f"http://127.0.0.1:{free_port()}", connect_timeout_s=1, tokenizer=tokenizer_folder()),
        policy=Policy(prefill_threshold_tokens=200, min_hold_s=0, health_interval_s=60),
        keys=Keys(admin=["admin-key"]),
    )
    with serve(config) as (url, _), httpx.Client(base_url=url) as http:
        http.post("/admin/realtime", json={"active": True, "ttl_s": 30}, headers=ADMIN)
        long_chat = {"model": "m", "messages": [{"role": "user", "content": "word " * 2000}]}
        shed = http.post("/v1/chat/completions", json=long_chat)
        assert shed.status_code == 429 and shed.headers["retry-after"] == "10"
        assert shed.headers["x-servelab-reason"] == "realtime_long_prefill"
        down = http.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert down.status_code == 503 and "local: " in down.json()["error"]["message"]
        assert http.post("/admin/bogus", json={"active": True}, headers=ADMIN).status_code == 404
