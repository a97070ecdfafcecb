"""A step from several hosts (servelab.bench.nodes): each node judged by the client rules on its own load processes,
a client verdict naming the nodes that were the limit, and the clock's offsets kept in the run's manifest with the
figures its bound is too coarse for said as not reported."""

from __future__ import annotations

from pathlib import Path

from servelab.bench.nodes import node_verdicts, step_hosts, with_nodes
from servelab.core.recorder import RunRecorder
from servelab.core.records import RequestRecord
from servelab.core.results import Bottleneck, ClientLoad
from servelab.core.store import RunStore
from servelab.load import ScenarioResult

BUSY = ClientLoad(worker=0, node="node aaaa at 10.0.0.1", cpu_share=0.97, loop_lag_ms={"p99": 3.0})
CALM = ClientLoad(worker=1, node="node bbbb at 10.0.0.2", cpu_share=0.2, loop_lag_ms={"p99": 0.5})
DEAD = ClientLoad(worker=2, node="node cccc at 10.0.0.3", died="The actor died because its node has died")


def test_each_node_is_judged_on_its_own_load_processes() -> None:
    said = node_verdicts([BUSY, CALM, DEAD])
    assert "was the limit here (a load process used 97% of a core)" in said[BUSY.node or ""]
    assert said[CALM.node or ""].endswith("kept up") and "CPU 20% of a core" in said[CALM.node or ""]
    assert "none finished" in said[DEAD.node or ""] and "its node has died" in said[DEAD.node or ""]
    assert node_verdicts([ClientLoad(worker=0)]) == {}  # this host alone: no node to name


def test_a_client_verdict_names_the_nodes_that_were_the_limit() -> None:
    verdict = Bottleneck(limit="client", reason="a load process used 97% of a core")
    named = with_nodes(verdict, [BUSY, CALM])
    assert named.reason.endswith(f"(on {BUSY.node})") and set(named.nodes) == {BUSY.node, CALM.node}
    engine = with_nodes(Bottleneck(limit="engine", reason="it held them"), [BUSY, CALM])
    assert engine.reason == "it held them" and len(engine.nodes) == 2


def _result(bound_ns: int) -> ScenarioResult:
    records = [RequestRecord(f"r{i}", "chat", sent_ns=i * 10**8, first_token_ns=i * 10**8 + 10**6,
                             end_ns=i * 10**8 + 10**9, completion_tokens=4) for i in range(10)]  # fmt: skip
    hosts = [{"worker": k, "node": f"node {k}", "offset_ns": 0, "bound_ns": bound_ns} for k in range(2)]
    return ScenarioResult("t", "s", records=records, hosts=hosts)


def test_the_offsets_go_to_the_manifest_and_a_coarse_bound_leaves_no_verdict(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    recorder = RunRecorder(store, "bench", {"kind": "bench"})
    fine = _result(400_000)  # 0.4 ms: finer than a tenth of 0.5 s and than 1% of the 1.9 s window
    assert step_hosts(recorder, "t/s", fine, 0.5) is None and fine.warnings == []
    coarse = _result(60_000_000)  # 60 ms
    why = step_hosts(recorder, "t/s@c2", coarse, 0.5)
    assert why is not None and why.startswith("no verdict: in flight at each engine scrape")
    assert len(coarse.warnings) == 2 and all(w.startswith("not reported: ") for w in coarse.warnings)
    clock = store.get_run(recorder.run_id).manifest["clock"]
    assert clock["t/s"] == fine.hosts and clock["t/s@c2"] == coarse.hosts
    assert step_hosts(recorder, "t/x", ScenarioResult("t", "x"), 0.5) is None  # this host alone: nothing to map
