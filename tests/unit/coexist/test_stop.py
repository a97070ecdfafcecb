"""A coexist condition always ends: the LLM load stops even where a request's cancellation is lost, and a probe
worker that stops answering fails the run with its name instead of holding it. The LLM side runs against the fake
capped engine (servelab.testing.engine_sim, not an LLM: the test is about a lost cancellation, which a real engine
cannot produce on demand); the wedged probe is a script that says it is ready and then never speaks, or the real
stand-in sized to outlast the stall limit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from servelab.coexist import LlmLoad
from servelab.coexist.conditions import parse_condition
from servelab.coexist.load import Background
from servelab.coexist.mitigations import Lease, LeaseHolder
from servelab.coexist.probes import ONE_THREAD, WorkerProbe, WorkerSpec
from servelab.core.errors import UsageError
from servelab.core.records import RequestRecord
from servelab.engines.client import StreamClient
from servelab.load import Target


@pytest.mark.parametrize("sim", [["--step-ms", 5]], indirect=True)
def test_the_llm_load_stops_when_a_cancellation_is_lost(sim: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    real_send = StreamClient.send
    lost: list[RequestRecord] = []

    async def send_losing_the_cancel(self: StreamClient, *args: Any, **kwargs: Any) -> RequestRecord:
        try:
            return await real_send(self, *args, **kwargs)
        except asyncio.CancelledError:  # as a racing timeout or a library can: the request ends, the task goes on
            if len(lost) >= 3:  # one per stream: a later cancellation (asyncio.run's teardown) goes through
                raise
            lost.append(kwargs["record"])
            return kwargs["record"]  # type: ignore[no-any-return]

    monkeypatch.setattr(StreamClient, "send", send_losing_the_cancel)
    records: list[RequestRecord] = []

    async def go() -> tuple[list[str], float, int]:
        background = Background(sim, records.append)
        background.start(parse_condition("decode"), LlmLoad(decode_streams=3, decode_tokens=400), None)
        await asyncio.sleep(0.5)
        began = time.perf_counter()
        notes = await asyncio.wait_for(background.stop(), 60)
        waited = time.perf_counter() - began
        await asyncio.sleep(0.3)  # nothing is sent after stop returned
        return notes, waited, len(records)

    notes, waited, at_stop = asyncio.run(go())
    assert lost, "the cancellation was never swallowed: the test did not exercise the loss"
    assert notes == []
    assert len(records) == at_stop  # no request was sent once stop had returned
    assert waited < 30  # the halted loops ended with their cancelled request, not at the grace limit


class _WedgedSpec(WorkerSpec):
    def argv(self) -> list[str]:
        ready = 'import json, time; print(json.dumps({"ready": {}}), flush=True); time.sleep(600)'
        return [sys.executable, "-c", ready]


def test_a_probe_worker_that_stops_answering_fails_with_its_name() -> None:
    probe = WorkerProbe(_WedgedSpec("cpu", "voice", period_ms=100), ready_timeout=30, stall_timeout=1.0)

    async def go() -> None:
        await probe.start()
        try:
            await probe.run(2, "alone")
        finally:
            await probe.close()

    with pytest.raises(UsageError, match=r"the cpu probe gave nothing for 1\.2 s"):
        asyncio.run(go())
    assert probe._proc is not None and probe._proc.returncode is not None  # killed, not left behind


def test_a_lease_renewal_the_gateway_refuses_is_reported_and_the_lease_still_released() -> None:
    """A hostile gateway (a fixture: it grants the lease, refuses every renewal with 503, accepts the release)."""
    bodies: list[dict[str, Any]] = []

    async def admin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):  # the client closed its keep-alive connection
            while head := await reader.readuntil(b"\r\n\r\n"):
                fields = dict(h.lower().split(b": ", 1) for h in head.strip().split(b"\r\n")[1:])
                length = int(fields[b"content-length"])
                bodies.append(json.loads(await reader.readexactly(length)))
                refused = bodies[-1]["active"] and len(bodies) > 1
                status = b"503 Service Unavailable" if refused else b"200 OK"
                writer.write(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}" % status)
                await writer.drain()

    async def go() -> list[str]:
        server = await asyncio.start_server(admin, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        holder = LeaseHolder(Lease(f"http://127.0.0.1:{port}", "admin-key", ttl_s=0.3))
        await holder.start()
        await asyncio.sleep(0.4)  # one renewal due every 0.1 s: the first is refused
        notes = await holder.stop()
        server.close()
        return notes

    notes = asyncio.run(go())
    assert len(notes) == 1 and "the realtime lease lapsed while the probe spoke" in notes[0] and "503" in notes[0]
    lease = bodies[0]["lease"]  # one id of its own, named by every call
    assert bodies[0] == {"active": True, "lease": lease, "ttl_s": 0.3} and bodies[-1] == {
        "active": False,
        "lease": lease,
    }
    assert sum(b["active"] for b in bodies) == 2  # the renewal loop ended at the refusal, not before


def test_two_coexist_runs_hold_their_own_leases_on_one_gateway() -> None:
    """Two coexist runs (two voice sessions) on one real gateway: each holds a lease of its own, so the first to
    finish does not end realtime for the other (the gateway's upstream is the hostile-peers fixture: no LLM is
    asked; only the admin API is)."""
    import httpx

    from servelab.gateway import running
    from tests.fixtures.hostile_peers import hostile_upstream, url
    from tests.unit.gateway.test_hardening import config

    def realtime(base: str) -> tuple[bool, int]:
        state = httpx.get(f"{base}/admin/state", headers={"authorization": "Bearer admin-key"}).json()
        return bool(state["realtime"]), len(state["realtime_leases"])

    async def go(base: str) -> list[tuple[bool, int]]:
        first, second = (LeaseHolder(Lease(base, "admin-key", ttl_s=30.0)) for _ in range(2))
        await first.start()
        await second.start()
        seen = [await asyncio.to_thread(realtime, base)]
        assert await first.stop() == []
        seen.append(await asyncio.to_thread(realtime, base))
        assert await second.stop() == []
        seen.append(await asyncio.to_thread(realtime, base))
        return seen

    with hostile_upstream() as up, running(config(url(up, "ok"))) as (base, _):
        held, after_first, after_both = asyncio.run(go(base))
    assert held == (True, 2)
    assert after_first == (True, 1)  # the second session's lease still holds realtime on
    assert after_both[1] == 0


def test_a_stalled_probe_worker_says_where_it_was() -> None:
    """The real stand-in, sized so one utterance takes far longer than the stall limit: the error names the frame
    the worker was in when asked (its stack, written on SIGUSR1), and the worker is killed."""
    spec = WorkerSpec("cpu", "voice", dim=512, layers=8, ffn=2048, chunks=1_000_000, period_ms=0)
    probe = WorkerProbe(spec, ready_timeout=120, stall_timeout=1.0)

    async def go() -> dict[str, Any]:
        info = await probe.start()
        try:
            await probe.run(1, "alone")
        finally:
            await probe.close()
        return info

    with pytest.raises(UsageError, match=r"gave nothing for 1 s \(killed\); it was at File \".*worker\.py\", line \d+"):
        asyncio.run(go())
    assert probe._proc is not None and probe._proc.returncode is not None
    assert probe._stack is not None and not Path(probe._stack).exists()  # its stack file removed on close


def test_the_cpu_stand_in_runs_one_blas_thread_unless_its_spec_says_otherwise() -> None:
    assert {WorkerSpec("cpu").environment()[k] for k in ONE_THREAD} == {"1"}
    assert WorkerSpec("cpu", env={"OPENBLAS_NUM_THREADS": "2"}).environment()["OPENBLAS_NUM_THREADS"] == "2"
    gpu = WorkerSpec("cuda").environment()
    assert all(gpu.get(k) == os.environ.get(k) for k in ONE_THREAD)  # the GPU probe's host threads as they were


def test_the_stand_in_runs_in_a_session_of_its_own_and_ends_with_its_caller() -> None:
    """Linux weighs CPU between sessions before tasks within one: the worker in the caller's session got that
    session's share against the engine's whole one (126 s of nothing in CI). Its own session; and it still ends
    when the caller's end of its pipe closes (the caller gone without a word), as no process group would end it."""
    probe = WorkerProbe(WorkerSpec("cpu", "voice", dim=64, layers=1, ffn=128, chunks=2, period_ms=0))

    async def go() -> tuple[int, int | None]:
        await probe.start()
        assert probe._proc is not None and probe._proc.stdin is not None
        session = os.getsid(probe._proc.pid)
        probe._proc.stdin.close()  # no "quit": the caller's end is simply gone
        code = await asyncio.wait_for(probe._proc.wait(), 30)
        await probe.close()
        return session, code

    session, code = asyncio.run(go())
    assert session != os.getsid(0)
    assert code == 0
