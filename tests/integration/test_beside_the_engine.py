"""A CPU probe and a gateway mitigation beside the embedded engine (the real vLLM on loopback). These run before
tests/integration/test_check.py, whose full check leaves the engine slower for minutes (seen in CI: the decode
requests' TTFT at 2-3 s after it); each LLM request here has only its condition's seconds, so on a slow engine none
may finish: what is checked of the LLM's side is what streamed (a load's throughput counts the requests cut off)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from servelab.bench import resolve_targets
from servelab.coexist import CoexistOptions, LlmLoad, run_coexist
from servelab.coexist.playback import Utterance
from servelab.coexist.probes import WorkerProbe, WorkerSpec
from servelab.core.store import RunStore


def _responsive(url: str, limit_s: float = 300.0) -> float:
    """Wait until the engine answers an 8-token request within 5 s: these runs give each LLM request only its
    condition's seconds, and a test before may have left the engine busy (a long prefill it has not yet seen cut
    off). Returns the last latency; fails with it if the engine stays slow."""
    deadline, latency = time.monotonic() + limit_s, float("inf")
    body = {"model": "smollm2-135m-instruct", "prompt": "Count to ten:", "max_tokens": 8, "temperature": 0}
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            ok = httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code == 200
        except httpx.HTTPError:
            ok = False
        latency = time.monotonic() - began
        if ok and latency < 5:
            return latency
        time.sleep(1)
    pytest.fail(f"the embedded engine still took {latency:.1f} s for 8 tokens after {limit_s:g} s")


@pytest.mark.integration
def test_cpu_probe_beside_the_embedded_engine_all_four_conditions(engine: object, tmp_path: Path) -> None:
    from tests.integration.conftest import TEST_PORT

    _responsive(f"http://127.0.0.1:{TEST_PORT}")
    target = resolve_targets([("embedded", f"http://127.0.0.1:{TEST_PORT}")])[0]
    # one utterance due every 2 s: each condition lasts long enough for LLM requests to finish beside the probe
    probe = WorkerProbe(WorkerSpec("cpu", "voice", dim=256, layers=4, ffn=768, chunks=20, period_ms=2000))
    options = CoexistOptions(
        repeats=1,
        utterances=3,
        load=LlmLoad(decode_streams=2, decode_tokens=16, prefill_tokens=1500),
        settle_s=3.0,  # so requests of each kind finish within the condition on a 2-core machine
        sharing={"mode": "time-sliced"},
    )
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_coexist(db, probe, target, options)
        records = db.records(result.run_id)
        info = db.get_run(result.run_id)
    assert result.failed is None, result.failed
    baselines = ["llm:decode", "llm:prefill", "llm:decode+prefill"]
    assert [c.condition for c in result.conditions] == ["alone", "decode", "prefill", "both", *baselines]
    for figs in result.conditions[:4]:
        assert figs.utterances == 3 and figs.chunks == 60 and figs.interval_p99_ms is not None
    labels = {r.scenario for r in records}
    assert {"llm-decode@decode", "llm-prefill@prefill", "llm-decode@both", "llm-prefill@both"} <= labels
    assert not any(r.scenario.endswith("@alone") for r in records)
    assert {r.labels.condition for r in records} == {"decode", "prefill", "both", *baselines}
    # the LLM's side: each load's throughput beside the probe over the same load with no probe, judged
    for figs in result.conditions[1:4]:
        assert figs.llm is not None and figs.llm.tok_s_share is not None and figs.llm.tok_s_share > 0
        assert figs.verdict is not None and "the LLM kept" in figs.verdict
    # a slow engine may finish no request in a baseline's seconds: what streamed is its throughput
    assert all(c.utterances == 0 and c.llm is not None and c.llm.streamed_tok_s for c in result.conditions[4:])
    assert any(r.client_token_count for r in records if r.scenario == "llm-decode@decode")
    assert all(r.ok or r.error == "cancelled" for r in records), [r.error_detail for r in records if r.error]
    prefill = [r for r in records if r.scenario.startswith("llm-prefill") and r.ok]
    assert prefill and all(r.prompt_tokens and r.prompt_tokens >= 1400 for r in prefill)
    assert all(not r.cached_tokens for r in prefill), "a long prompt hit the prefix cache"
    assert info.status == "complete"
    assert result.probe["probe"] == "cpu" and "params" in result.probe


class _LeaseWatcher:
    """A scripted probe (the probe is not what is tested) that asks the gateway, while it "speaks", whether the
    realtime lease is held."""

    kind = "watcher"

    def __init__(self, gateway: str) -> None:
        self.gateway, self.seen = gateway, {}  # type: dict[str, bool]

    async def start(self) -> dict[str, object]:
        return {"probe": self.kind}

    async def run(self, utterances: int, condition: str) -> list[Utterance]:

        from servelab.coexist.playback import Chunk

        async with httpx.AsyncClient(headers={"Authorization": "Bearer admin-key"}) as client:
            state = (await client.get(f"{self.gateway}/admin/state")).json()
        self.seen[condition] = bool(state["realtime"])
        await asyncio.sleep(1.5)  # long enough for the LLM load's requests to finish beside it
        t = time.perf_counter()
        return [Utterance(t, tuple(Chunk(t + 0.01 * (i + 1), 0.04) for i in range(10)), condition)]

    async def close(self) -> None:
        pass


@pytest.mark.integration
def test_a_gateway_mitigation_holds_the_lease_while_the_probe_speaks(engine: object, tmp_path: Path) -> None:
    """The plain target, then the same LLM load through a real servelab gateway in front of the embedded engine:
    the gateway's realtime lease is on exactly while the probe speaks in the gateway's condition, its LLM requests
    go through the gateway, the share is against the plain load with no probe, and a verdict per mitigation."""
    from servelab.coexist import Lease, Mitigation, mitigation_lines
    from servelab.gateway import GatewayConfig, running
    from servelab.gateway.config import Keys, Policy, Upstream
    from tests.integration.conftest import TEST_PORT

    engine_url = f"http://127.0.0.1:{TEST_PORT}"
    _responsive(engine_url)
    config = GatewayConfig(port=0, local=Upstream(url=engine_url, connect_timeout_s=2),
                           policy=Policy(health_interval_s=0.2, min_hold_s=0),
                           keys=Keys(admin=["admin-key"]))  # fmt: skip
    with running(config) as (gw_url, _):
        direct, through = resolve_targets([("embedded", engine_url), ("gw", gw_url)])
        probe = _LeaseWatcher(gw_url)
        gateway = Mitigation("gw", through, Lease(gw_url, "admin-key", ttl_s=3))
        options = CoexistOptions(conditions=("alone", "decode"), repeats=1, utterances=1, settle_s=1.0,
                                 load=LlmLoad(decode_streams=1, decode_tokens=8), mitigations=(gateway,))  # fmt: skip
        with RunStore(tmp_path / "runs.sqlite") as db:
            result = run_coexist(db, probe, direct, options)
            records = db.records(result.run_id)

        after = httpx.get(f"{gw_url}/admin/state", headers={"Authorization": "Bearer admin-key"}).json()
    assert result.failed is None, result.failed
    assert [c.condition for c in result.conditions] == ["alone", "decode", "gw/decode", "llm:decode"]
    assert probe.seen == {"alone": False, "decode": False, "gw/decode": True} and after["realtime"] is False
    through_gw = [r for r in records if r.labels.condition == "gw/decode"]
    assert through_gw and {r.target for r in through_gw} == {"gw"}
    assert any(r.client_token_count for r in through_gw)  # the gateway relayed tokens (finished or cut off)
    by = {c.condition: c for c in result.conditions}
    assert by["gw/decode"].llm is not None and by["gw/decode"].llm.tok_s_share is not None
    lines = mitigation_lines(result.conditions)
    assert any(line.startswith("gw: ") for line in lines) and any(line.startswith("no mitigation: ") for line in lines)
