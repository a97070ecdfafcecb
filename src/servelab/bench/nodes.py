"""A step whose load came from several hosts (Ray actors): the verdict per node, each node's load processes judged by
the client rules of :mod:`.verdict` on their own figures (CPU, event-loop lag, read lateness), the engine's side read
once by the coordinator; and the figures across hosts its clocks are too coarsely aligned to give
(:func:`servelab.load.cluster.unaligned`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servelab.bench.evidence import client_evidence
from servelab.bench.verdict import client_limited
from servelab.core.recorder import RunRecorder
from servelab.core.records import RequestRecord
from servelab.core.results import Bottleneck, ClientLoad
from servelab.core.summary import active_window_ns
from servelab.load.cluster import unaligned
from servelab.load.runner import ScenarioResult


def node_verdicts(clients: Sequence[ClientLoad]) -> dict[str, str]:
    """Node -> its load processes' figures and whether they were the limit there (a node whose processes all died
    says so)."""
    out: dict[str, str] = {}
    for node in sorted({c.node for c in clients if c.node}):
        mine = [c for c in clients if c.node == node]
        live = [c for c in mine if c.died is None]
        if not live:
            out[node] = f"{len(mine)} load process(es), none finished: {mine[0].died}"
            continue
        ev = client_evidence(live, [])
        figures = (f"{len(live)} load process(es), CPU {ev['client_cpu_max']:.0%} of a core at most, event loop "
                   f"{ev['loop_lag_p99_ms']:g} ms late and reads {ev['read_late_p99_ms']:g} ms late (p99)")  # fmt: skip
        why = client_limited(ev)
        out[node] = f"{figures}: the load generator was the limit here ({why})" if why else f"{figures}: kept up"
    return out


def with_nodes(verdict: Bottleneck, clients: Sequence[ClientLoad]) -> Bottleneck:
    """The step's verdict with each node's own beside it (a client verdict names the nodes that were the limit)."""
    nodes = node_verdicts(clients)
    if not nodes:
        return verdict
    update: dict[str, Any] = {"nodes": nodes}
    limited = [n for n, said in nodes.items() if "was the limit here" in said]
    if verdict.limit == "client" and limited:
        update["reason"] = f"{verdict.reason} (on {', '.join(limited)})"
    return verdict.model_copy(update=update)


def step_hosts(recorder: RunRecorder, step: str, res: ScenarioResult, scrape_interval_s: float) -> str | None:
    """A step from Ray actors: each one's node and clock offset (with its bound) into the run's manifest, and the
    figures its clocks are aligned too coarsely for said as not reported; the verdict's in-flight comparison among
    them gives the step's reason for no verdict."""
    if not res.hosts:
        return None
    recorder.note("clock", step, res.hosts)
    hidden = alignment(res.hosts, res.records, scrape_interval_s)
    res.warnings += [f"not reported: {h}" for h in hidden]
    return next((f"no verdict: {h}" for h in hidden if h.startswith("in flight")), None)


def alignment(hosts: Sequence[dict[str, Any]], records: Sequence[RequestRecord], scrape_interval_s: float) -> list[str]:
    """What a step from several hosts cannot report: the figures needing its clocks aligned finer than its bound."""
    bounds = [int(h["bound_ns"]) for h in hosts if "bound_ns" in h]
    if not bounds:
        return []  # this host alone: one clock
    window = active_window_ns([r for r in records if r.ok]) if len(bounds) > 1 else 0  # one actor: one clock
    return unaligned(max(bounds), window, scrape_interval_s)
