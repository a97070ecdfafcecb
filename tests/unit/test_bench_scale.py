"""Bench at scale: the bottleneck verdict, load from several processes (records merged on one clock, a worker
killed mid-run), the JSON summary per step.

The server here is servelab.testing.engine_sim, a FAKE engine (not an LLM) in a process of its own: a test of where
a ceiling is needs a server whose token rate is capped, or whose frontend holds requests, on demand, which a real
engine cannot be made to do."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from servelab.bench import Load, bottleneck, run_bench
from servelab.bench.verdict import client_limited
from servelab.core.records import RequestRecord
from servelab.core.results import BenchRun, load_result
from servelab.core.store import RunStore
from servelab.core.summary import summarize
from servelab.engines.lateness import Lateness
from servelab.load import Target, default_workers, run_in_workers
from servelab.load.scenarios import Scenario, load_scenario
from servelab.load.workers import split
from tests.unit.quiet_client import client_never_the_limit


def _chat(concurrency: int) -> Scenario:
    return replace(load_scenario("code-chat"), concurrency=concurrency)


def _bench(tmp_path: Path, target: Target, concurrency: int, load: Load) -> BenchRun:
    store = RunStore(tmp_path / "runs.sqlite")
    result = run_bench(store, [target], [_chat(concurrency)], load, scrape_interval=0.1)
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, BenchRun) and stored.status == "complete"
    return stored


@pytest.mark.parametrize("sim", [["--max-running", 4, "--step-ms", 5]], indirect=True)
def test_a_capped_engine_is_the_server_side_limit(sim: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """16 streams on an engine that runs 4 (800 tok/s at most): requests wait in its queue, and the verdict says
    the engine, with the queue and a token rate at the cap as evidence (the client's rules out of reach: a busy
    machine does not decide it)."""
    client_never_the_limit(monkeypatch)
    stored = _bench(tmp_path, sim, 16, Load(requests=96, warmup=1, max_tokens=20, workers=1))
    (step,) = stored.steps
    assert step.bottleneck is not None and step.bottleneck.limit == "engine"
    ev = step.bottleneck.evidence
    assert isinstance(ev["engine_waiting_mean"], float) and ev["engine_waiting_mean"] > 4
    assert isinstance(ev["engine_tok_s"], float) and ev["engine_tok_s"] <= 4 / 0.005 * 1.05
    assert "waiting" in step.bottleneck.reason


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 5, "--admit-ms", 30]], indirect=True)
def test_requests_held_before_the_engine_are_the_frontend(
    sim: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frontend that admits one request per 30 ms holds most of 8 streams while the engine has room: the client
    counts more in flight than the engine runs or queues (the client's rules out of reach: a busy machine does not
    decide it)."""
    client_never_the_limit(monkeypatch)
    stored = _bench(tmp_path, sim, 8, Load(requests=40, warmup=1, max_tokens=10, workers=1))
    (step,) = stored.steps
    assert step.bottleneck is not None and step.bottleneck.limit == "server frontend"
    ev = step.bottleneck.evidence
    assert isinstance(ev["not_in_engine_share"], float) and ev["not_in_engine_share"] >= 0.3
    assert "api-server-count" in (step.bottleneck.hint or "")


def _hog(stop: threading.Event) -> None:
    while not stop.is_set():
        pass


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 5]], indirect=True)
def test_a_starved_client_is_called_the_limit(sim: Target, tmp_path: Path) -> None:
    """A thread spinning in the load process's own interpreter starves its event loop: the verdict is the client,
    whatever the server did. 40 requests: more than a closed loop of 8 needs to be judged at all (32), so a client
    starved enough never to hold its 8 streams is still judged (CI once saw 24 requests reach 6 at most: no
    verdict)."""
    stop = threading.Event()
    thread = threading.Thread(target=_hog, args=(stop,), daemon=True)
    thread.start()
    try:
        stored = _bench(tmp_path, sim, 8, Load(requests=40, warmup=0, max_tokens=20, workers=1))
    finally:
        stop.set()
        thread.join()
    (step,) = stored.steps
    assert step.bottleneck is not None and step.bottleneck.limit == "client"
    assert "--workers" in (step.bottleneck.hint or "")
    # the hog holds the interpreter: the loop runs behind whatever the machine's other work leaves this process (its
    # CPU share reached 0.9 of a core on a quiet machine, 0.83 on a busy one): the rule that named it says which
    assert client_limited(step.bottleneck.evidence) or "streams had a request in flight" in step.bottleneck.reason


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 2]], indirect=True)
def test_two_workers_send_exactly_the_run_and_merge_on_one_clock(sim: Target, tmp_path: Path) -> None:
    """Two processes share one request counter (30 sent, each index once); the parent's step summary, computed
    from the merged records as they came, equals one summary over the same records read back from the store."""
    store = RunStore(tmp_path / "runs.sqlite")
    result = run_bench(
        store, [sim], [_chat(6)], Load(requests=30, warmup=1, max_tokens=12, workers=2), scrape_interval=0.1
    )
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, BenchRun)
    (step,) = stored.steps
    assert [c.worker for c in step.clients] == [0, 1] and all(c.died is None for c in step.clients)
    assert sum(c.requests for c in step.clients) == 30 and all(c.in_flight_max == 3 for c in step.clients)
    records = store.records(result.run_id)
    assert len(records) == 30 and all(r.ok and r.completion_tokens == 12 for r in records)
    assert summarize(records) == step.summary
    assert summarize(list(reversed(records))) == step.summary  # order of arrival from the workers does not matter
    assert step.bottleneck is not None and step.bottleneck.evidence["workers"] == 2


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 2]], indirect=True)
def test_an_open_loop_split_over_workers_keeps_the_schedule(sim: Target) -> None:
    """Two workers draw one constant-rate schedule from one start: the merged due times are the single schedule,
    every 1/rate apart, each due once."""
    got: list[RequestRecord] = []
    load = Load(requests=20, rate=40.0, arrival="constant", warmup=0, max_tokens=4, workers=2)
    import asyncio

    result = asyncio.run(run_in_workers(sim, _chat(1), load, got.append, workers=2))
    due = sorted(r.scheduled_ns for r in result.records if r.scheduled_ns is not None)
    assert len(due) == 20 and len(got) == 20
    gaps = {b - a for a, b in itertools.pairwise(due)}
    assert all(abs(g - 25_000_000) <= 1 for g in gaps)  # offsets are exact: 1/40 s apart, ns rounding aside


def _kill_one_worker(after_s: float, killed: list[int], once: list[RequestRecord] | None = None) -> None:
    """SIGKILL to the last worker: ``after_s`` after both exist, or once ``once`` holds two records (mid-run)."""
    deadline = time.monotonic() + 30
    while len(mp.active_children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    while once is not None and len(once) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(after_s)
    victim = mp.active_children()[-1]
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    killed.append(victim.pid)


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 10]], indirect=True)
def test_a_worker_killed_mid_run_loses_only_its_in_flight_requests(sim: Target) -> None:
    """SIGKILL to one of two workers mid-run (0.2 s after the first records came back, requests of 0.5 s): the run
    ends, the other worker sends the rest, the dead one's finished records are kept, its in-flight ones are lost,
    and the step names the worker, the signal and the loss."""
    killed: list[int] = []
    got: list[RequestRecord] = []
    killer = threading.Thread(target=_kill_one_worker, args=(0.2, killed, got))
    killer.start()
    load = Load(requests=24, warmup=0, max_tokens=50, workers=2)
    import asyncio

    result = asyncio.run(run_in_workers(sim, _chat(4), load, got.append, workers=2))
    killer.join()
    assert killed
    dead = [c for c in result.clients if c.died]
    assert len(dead) == 1 and "signal 9" in (dead[0].died or "")
    assert any("load worker" in w and "died" in w for w in result.warnings)
    assert all(r.ok for r in result.records) and len(got) == len(result.records)
    assert 2 <= len(result.records) < 24  # the dead worker's in-flight (and untaken) requests are not there
    survivors = {r.request_id for r in result.records}
    assert len(survivors) == len(result.records)


def test_default_workers_follow_the_load_and_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    import servelab.load.workers as workers

    monkeypatch.setattr(workers, "usable_cores", lambda: 16)
    assert default_workers(Load(concurrency=32), _chat(1)) == 1
    assert default_workers(Load(concurrency=33), _chat(1)) == 2
    assert default_workers(Load(concurrency=64), _chat(1)) == 2
    assert default_workers(Load(concurrency=128), _chat(1)) == 4
    assert default_workers(Load(concurrency=1024), _chat(1)) == 8  # half the cores
    assert default_workers(Load(rate=100.0), _chat(1)) == 4
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)
    assert default_workers(Load(concurrency=1024), _chat(1)) == 1
    assert split(10, 4) == [3, 3, 2, 2] and sum(split(1023, 8)) == 1023


def test_the_lateness_ring_keeps_the_most_recent_readings() -> None:
    ring = Lateness(size=8)
    mark = ring.count
    for v in range(5):
        ring.add(v)
    assert ring.since(mark) == [0, 1, 2, 3, 4]
    for v in range(5, 20):
        ring.add(v)
    assert ring.since(mark) == list(range(12, 20))  # only the last 8 are kept
    assert ring.since(ring.count) == []


SPINNER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""


def test_the_cpu_of_the_process_holding_a_local_port_is_measured() -> None:
    """A process that listens on a port and spins: found through /proc as the one holding the port, its CPU share
    over a window read from its own counters: what the kernel counted for it over the same window, whatever share
    of a core this machine's other work left it (a busy machine left it 17%, where a quiet one gave it most of a
    core: a fixed floor made the test about spare CPU)."""
    import asyncio
    import time

    from servelab.engines.local_server import FrontendCpu, cpu_seconds

    proc = subprocess.Popen([sys.executable, "-c", SPINNER, "3"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    try:
        frontend = FrontendCpu(f"http://127.0.0.1:{port}/v1")
        before, t0 = cpu_seconds(proc.pid), time.perf_counter()
        frontend.start()
        asyncio.run(asyncio.sleep(1.0))
        frontend.sample()
        after, t1 = cpu_seconds(proc.pid), time.perf_counter()
        assert frontend.pids == [proc.pid]
        (share,) = frontend.shares()
        assert before is not None and after is not None and after > before  # it ran
        counted = (after - before) / (t1 - t0)  # the kernel's count over a window a little wider than the sampler's
        assert 0 < share <= 1.1 and abs(share - counted) <= 0.1 + 0.1 * counted, (share, counted)
    finally:
        proc.kill()
        proc.wait()
    assert FrontendCpu("http://10.1.2.3:8000").shares() == []  # not on this host: nothing read


def test_a_one_thread_frontend_at_a_full_core_is_the_limit_a_busy_engine_process_is_not() -> None:
    """The verdict from the frontend process's CPU: one core's worth (a Python frontend's event loop) is the server
    frontend, before the engine's queue it causes; several cores' worth is an engine computing in that process."""
    from servelab.bench.metrics import Sample
    from servelab.core.records import RequestRecord
    from servelab.core.results import ClientLoad

    records = [RequestRecord(f"r{i}", "chat", sent_ns=i * 10**8, end_ns=i * 10**8 + 10**9, completion_tokens=10)
               for i in range(10)]  # fmt: skip
    samples = [Sample(t * 10**8, {"vllm:num_requests_running": 4.0, "vllm:num_requests_waiting": 6.0})
               for t in range(1, 20)]  # fmt: skip
    client = [ClientLoad(cpu_share=0.2, loop_lag_ms={"p99": 1.0})]
    assert bottleneck(records, samples, client, False, [0.97]).limit == "server frontend"
    assert bottleneck(records, samples, client, False, [1.9]).limit == "engine"  # waiting in the engine's queue
    assert bottleneck(records, samples, client, False, []).limit == "engine"


def test_the_frontends_processes_are_the_ones_holding_the_port() -> None:
    """This process listens on a port: it is found as the one holding it, and its CPU time is read."""
    import socket

    from servelab.engines.local_server import cpu_seconds, listening_pids, local_port

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert listening_pids(port) == [os.getpid()]
    assert listening_pids(port) == []
    assert local_port(f"http://127.0.0.1:{port}/v1") == port and local_port("http://10.0.0.5:8000") is None
    spent = cpu_seconds(os.getpid())
    assert spent is not None and spent > 0


STARVED = """
import json, os, sys
from dataclasses import replace
from pathlib import Path
from servelab.bench import Load, bottleneck, run_bench
from servelab.bench.verdict import client_limited
from servelab.core.store import RunStore
from servelab.load import Target
from servelab.load.scenarios import load_scenario
scenario = replace(load_scenario("code-chat"), concurrency=8)
os.sched_setaffinity(0, {0})  # imported first at full speed; from here on it runs at nice 10 beside three busy
os.nice(10)  # processes on its one core: about a thirtieth of it, so its loop waits whenever it has work
result = run_bench(RunStore(Path(sys.argv[2]) / "runs.sqlite"), [Target("sim", sys.argv[1], "sim")], [scenario],
                   Load(requests=48, warmup=0, max_tokens=40, workers=1), scrape_interval=0.1)
(step,) = result.stored.steps
print(json.dumps(step.bottleneck.model_dump()))
"""
HOG = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a core for the server beside the starved one")
@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 2]], indirect=True)
def test_a_client_starved_by_other_processes_is_called_the_limit(sim: Target, tmp_path: Path) -> None:
    """The load process confined to one core with three busy processes, at nice 10 against their 0: it gets little
    of the core, so its own CPU share is low, but its event loop runs behind whenever it has work: the verdict is
    the client. (At the same priority as the busy processes, the scheduler's preference for a waking task let it
    keep up on a quiet machine: CI saw "engine", the engine holding 98% of the requests' time.)"""
    import json

    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(3)]
    try:
        out = subprocess.run([sys.executable, "-c", STARVED, sim.url, str(tmp_path)], capture_output=True, text=True,
                             timeout=300, check=True).stdout  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    verdict = json.loads(out.strip().splitlines()[-1])
    assert verdict["limit"] == "client", verdict
    ev = verdict["evidence"]
    assert ev["client_cpu_max"] < 0.9, verdict  # not a full core: starved, not busy
    # Starvation shows as a loop behind in many ticks, as streams left without a request while the engine had what
    # was sent, or (when the hogs leave it a few long slices) as replies left unread in its socket buffers while its
    # loop or its reads ran late: each rule names the client.
    late_ticks = ev["loop_late_share_max"] >= 0.25
    read_late = ev["loop_lag_p99_ms"] >= 20.0 or ev["read_late_p99_ms"] >= 5.0
    idle_streams = ev["client_occupancy"] < 0.9 and "streams had a request in flight" in verdict["reason"]
    assert late_ticks or idle_streams or (read_late and "waiting on the client" in verdict["reason"]), verdict


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 2]], indirect=True)
def test_a_worker_dead_before_it_was_ready_does_not_hold_the_others(sim: Target) -> None:
    """SIGKILL to a worker as soon as it exists (while it is still importing): the other starts anyway and sends
    the run's requests; the dead one is named."""
    import asyncio

    killed: list[int] = []
    killer = threading.Thread(target=_kill_one_worker, args=(0.0, killed))
    killer.start()
    got: list[RequestRecord] = []
    result = asyncio.run(run_in_workers(sim, _chat(2), Load(requests=6, warmup=0, max_tokens=4), got.append, workers=2))
    killer.join()
    assert killed and len([c for c in result.clients if c.died]) == 1
    assert len(result.records) == 6 and all(r.ok for r in result.records)  # the living worker took every index


def test_replies_waiting_in_a_late_clients_buffers_are_not_the_frontend() -> None:
    """The same in-flight gap (the client counts 3.8 requests, the engine runs none): with a client that read its
    bytes late the replies were waiting on the client (seen in CI with the load process starved); with prompt reads
    the requests were in the server's frontend (as on the H200 with one API server: reads late at most 2.3 ms)."""
    from servelab.bench.verdict import _replies_waiting_on_client

    ev: dict[str, object] = {"in_flight_mean": 3.8, "not_in_engine_share": 1.0, "engine_running_mean": 0.0,
                             "engine_waiting_mean": 0.0, "scrapes": 12, "loop_lag_p99_ms": 35.5,
                             "read_late_p99_ms": 11.0}  # fmt: skip
    assert "waiting on the client" in (_replies_waiting_on_client(ev) or "")  # type: ignore[arg-type]
    prompt = dict(ev, loop_lag_p99_ms=1.3, read_late_p99_ms=0.3)
    assert _replies_waiting_on_client(prompt) is None  # type: ignore[arg-type]
