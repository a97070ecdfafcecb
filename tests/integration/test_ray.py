"""`bench --ray` on a real Ray cluster on loopback: a head and a second node (`ray start`, one CPU and a resource of
their own each, their own ports and temp dir; servelab.testing.ray_cluster), against the truth sink (the FAKE SSE
server of servelab.testing, not an LLM: each chunk carries its perf_counter_ns at the write, and the first also when
the request had been read).

One host runs every process here, so its CLOCK_MONOTONIC is one clock: each actor's true offset to the coordinator is
0, and the mapped stamps can be checked against the sink's own. No figure here rests on a timing margin of the
machine's: a chunk can never arrive before it was sent, and the offsets must hold 0 within their own bounds.

The last test kills the second node: it runs last (pytest keeps this file's order)."""

from __future__ import annotations

import itertools
import re
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray tests need the ray extra: pip install -e '.[ray]'")

from servelab.bench import Load, run_bench
from servelab.core.records import RequestRecord
from servelab.core.results import BenchRun, load_result
from servelab.core.store import RunStore
from servelab.load import Target
from servelab.load.cluster import connect, disconnect, run_on_ray
from servelab.load.scenarios import load_scenario
from servelab.testing.ray_cluster import LocalRayCluster, kill_when, local_ray_cluster

SINK = "from servelab.testing.sse_server import main; main()"
CHUNKS, ITL_MS = 20, 20.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    with local_ray_cluster(("head", "second")) as running:
        try:
            connect(running.address)  # this process's driver, as `bench --ray` connects (node_ids asks through it)
            yield running
        finally:
            disconnect()  # this process's driver leaves before the nodes stop


@pytest.fixture(scope="module")
def sink() -> Iterator[Target]:
    proc = subprocess.Popen([sys.executable, "-c", SINK, "0", "--sink", str(CHUNKS), str(ITL_MS), "1"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield Target("sink", f"http://127.0.0.1:{port}", "sink")
    proc.kill()
    proc.wait(timeout=10)


def _sink_stamps(record: RequestRecord) -> tuple[int, list[int]]:
    """(when the sink had read the request, when it wrote each chunk): its own perf_counter_ns."""
    words = record.output_text.split()
    recv, _, first = words[0].partition(":")
    return int(recv), [int(first), *(int(w) for w in words[1:])]


def test_a_bench_through_both_nodes_keeps_the_sinks_truth_on_one_clock(
    cluster: LocalRayCluster, sink: Target, tmp_path: Path
) -> None:
    """24 requests at 4 streams from two actors, one on each node: each sends its half; every record is stored on the
    coordinator's clock, where no chunk arrives before the sink wrote it and no request reaches the sink before it
    was sent (within the mapping's bound); the client's TTFT holds the sink's own part and its inter-chunk gaps are
    the sink's; each actor's offset (truly 0 on one host) is 0 within its bound, and the bound is in the manifest."""
    store = RunStore(tmp_path / "runs.sqlite")
    scenario = replace(load_scenario("code-chat"), concurrency=4)
    load = Load(requests=24, warmup=1, max_tokens=CHUNKS, fixed_output="off", workers=2, ray=cluster.address)
    result = run_bench(store, [sink], [scenario], load, scrape_interval=0.5)
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, BenchRun) and stored.status == "complete"
    (step,) = stored.steps
    ids = cluster.node_ids()
    assert sorted(_id(c.node) for c in step.clients) == sorted(i[:8] for i in ids.values())  # one on each node
    assert [c.requests for c in step.clients] == [12, 12] and all(c.died is None for c in step.clients)
    records = store.records(result.run_id)
    assert len(records) == 24 and all(r.ok and len(r.chunk_ns) == CHUNKS for r in records)

    clock = store.get_run(result.run_id).manifest["clock"]["sink/code-chat"]
    assert [h["worker"] for h in clock] == [0, 1]
    for host in clock:
        assert abs(host["offset_ns"]) <= host["bound_ns"], host  # one host: the true offset is 0
    bound = max(h["bound_ns"] for h in clock)

    errors, gap_errors = [], []
    for r in records:
        recv, sent = _sink_stamps(r)
        assert r.sent_ns is not None and r.first_token_ns is not None
        assert r.sent_ns <= recv + bound  # sent before the sink had read it
        assert r.first_token_ns >= sent[0] - bound  # the first token after the sink wrote it
        assert all(a >= s - bound for a, s in zip(r.chunk_ns, sent, strict=True))  # never before its write
        errors += [a - s for a, s in zip(r.chunk_ns, sent, strict=True)]
        gaps = zip(itertools.pairwise(r.chunk_ns), itertools.pairwise(sent), strict=True)
        gap_errors += [(b - a) - (sb - sa) for (a, b), (sa, sb) in gaps]
    # kernel receive stamps: the stamp error is loopback delivery, plus the mapping's own error (within the bound)
    assert statistics.median(errors) <= 1_000_000 + bound, statistics.median(errors)
    assert abs(statistics.median(gap_errors)) <= 1_000_000, statistics.median(gap_errors)
    assert step.summary.itl_ms["p50"] == pytest.approx(
        statistics.median([(b - a) / 1e6 for r in records for a, b in itertools.pairwise(r.chunk_ns)])
    )
    assert step.bottleneck is not None and set(step.bottleneck.nodes) == {c.node for c in step.clients}


def _id(node: str | None) -> str:
    """The node id in ``node 3f2a9c1b at 10.0.0.5``."""
    assert node is not None and node.startswith("node ")
    return node.split()[1]


def test_an_open_loop_over_two_nodes_keeps_the_one_schedule(cluster: LocalRayCluster, sink: Target) -> None:
    """Two actors draw one constant-rate schedule, every other arrival each, from one start sent to each in its own
    clock: mapped back, the due times are the single schedule, 1/rate apart, each due once."""
    import asyncio

    got: list[RequestRecord] = []
    load = Load(requests=20, rate=40.0, arrival="constant", warmup=0, max_tokens=4, fixed_output="off", workers=2)
    scenario = load_scenario("code-chat")
    result = asyncio.run(run_on_ray(sink, scenario, load, got.append, cluster.address))
    due = sorted(r.scheduled_ns for r in result.records if r.scheduled_ns is not None)
    assert len(due) == 20 and len(got) == 20 and len({c.node for c in result.clients}) == 2
    gaps = {b - a for a, b in itertools.pairwise(due)}
    assert all(abs(g - 25_000_000) <= 1 for g in gaps)  # exact (ns rounding aside): the mapping moves both ends alike


def test_a_node_killed_mid_run_is_named_with_what_it_lost(cluster: LocalRayCluster, sink: Target) -> None:
    """SIGKILL to every process of the second node once records have come back (requests of 20 chunks 20 ms apart):
    its actor is named, with its node, the cause and the requests it lost (in flight, and its share not sent);
    the other actor sends its whole share and every record that came back is kept."""
    import asyncio

    ids = cluster.node_ids()
    second = next(n for n in cluster.nodes if n.name == "second")
    got: list[RequestRecord] = []
    some = threading.Event()

    def sink_and_watch(record: RequestRecord) -> None:
        got.append(record)
        if len(got) >= 4:
            some.set()

    killer = kill_when(second, some)
    load = Load(requests=40, warmup=0, max_tokens=CHUNKS, fixed_output="off", workers=2)
    scenario = replace(load_scenario("code-chat"), concurrency=4)
    result = asyncio.run(run_on_ray(sink, scenario, load, sink_and_watch, cluster.address))
    killer.join(timeout=120)
    assert some.is_set()
    dead = [c for c in result.clients if c.died]
    assert len(result.clients) == 2 and len(dead) == 1
    assert dead[0].node is not None and ids["second"][:8] in dead[0].node
    print(next(w for w in result.warnings if "died" in w))
    alive = next(c for c in result.clients if not c.died)
    assert alive.requests == 20  # its whole share
    assert any(f"on {dead[0].node} died" in w for w in result.warnings)
    said = re.search(r"(\d+) request\(s\) in flight .*?, (\d+) of its 20 not sent", dead[0].died or "")
    assert said is not None, dead[0].died
    came_back = len(result.records) - alive.requests
    assert came_back + int(said[1]) + int(said[2]) == 20  # every request of its share is accounted for
    assert came_back < 20 and all(r.ok for r in result.records) and len(got) == len(result.records)
