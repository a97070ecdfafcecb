"""Which side limited a step: the load generator, the server's HTTP frontend or the engine, with the evidence.

- **client**: a load-generating process near a full core, its event loop running late, or it reading the bytes
  the kernel had received late (its stamps, and the load it offered, are then its own limit).
- **engine**: requests queue in the engine's scheduler (its ``waiting`` gauge) or its KV cache is full; or the
  engine ran every request the client had in flight, so its step time set the speed.
- **server frontend**: the client had more requests in flight than the engine counted running or waiting: the
  rest were in the server's HTTP process (parsing, tokenizing, streaming back), e.g. vLLM's one API server.
- **server**: the client was not the limit and the server publishes no /metrics to say which part was.

The engine's figures are its /metrics series scraped beside the step on the client's clock; the client's in-flight
count at each scrape is read from the step's own records.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from statistics import fmean

from servelab.bench.metrics import Sample, figure
from servelab.core.records import RequestRecord
from servelab.core.results import Bottleneck, ClientLoad, Scalar
from servelab.core.summary import output_tokens

CLIENT_CPU = 0.90  # of one core, any worker
CLIENT_LOOP_LAG_MS = 20.0  # p99 of a 10 ms timer's lateness
CLIENT_READ_LATE_MS = 5.0  # p99 of kernel receive -> the client's read
SCHEDULE_LAG_MS = 10.0  # p99 of an open loop's sent - due
FRONTEND_SHARE = 0.15  # of the client's in-flight requests not seen by the engine
ENGINE_WAITING_SHARE = 0.05  # of the in-flight requests waiting in the engine's queue
KV_FULL = 0.95


def client_evidence(clients: Sequence[ClientLoad], records: Sequence[RequestRecord]) -> dict[str, Scalar]:
    live = [c for c in clients if c.died is None]
    lag = [c.sent_ns - c.scheduled_ns for c in records if c.sent_ns is not None and c.scheduled_ns is not None]
    return {
        "workers": len(clients),
        "client_cpu_max": round(max((c.cpu_share for c in live), default=0.0), 3),
        "loop_lag_p99_ms": round(max((c.loop_lag_ms.get("p99", 0.0) for c in live), default=0.0), 3),
        "read_late_p99_ms": round(max((c.read_late_ms.get("p99", 0.0) for c in live), default=0.0), 3),
        "schedule_lag_p99_ms": round(_p99(lag) / 1e6, 3) if lag else None,
    }


def _p99(values: list[int]) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))])


def client_limited(ev: dict[str, Scalar], open_loop: bool) -> str | None:
    """Why the client was the limit, or None."""
    cpu, lag, late, sched = (ev[k] for k in ("client_cpu_max", "loop_lag_p99_ms", "read_late_p99_ms",
                                             "schedule_lag_p99_ms"))  # fmt: skip
    if isinstance(cpu, float) and cpu >= CLIENT_CPU:
        return f"a load process used {cpu:.0%} of a core"
    if isinstance(lag, float) and lag >= CLIENT_LOOP_LAG_MS:
        return f"a load process's event loop ran {lag:.1f} ms late (p99)"
    if isinstance(late, float) and late >= CLIENT_READ_LATE_MS:
        return f"a load process read received bytes {late:.1f} ms late (p99)"
    if open_loop and isinstance(sched, float) and sched >= SCHEDULE_LAG_MS:
        return f"requests went out {sched:.1f} ms after they were due (p99)"
    return None


def in_flight_at(records: Sequence[RequestRecord]) -> tuple[list[int], list[int]]:
    """Sorted send and end times: in flight at t = sends at or before t - ends at or before t."""
    spans = [(r.sent_ns, r.end_ns) for r in records if r.sent_ns is not None and r.end_ns is not None]
    return sorted(s for s, _ in spans), sorted(e for _, e in spans)


def server_evidence(records: Sequence[RequestRecord], samples: Sequence[Sample]) -> dict[str, Scalar]:
    """The engine's gauges at every scrape while the client had requests in flight, beside that count."""
    sends, ends = in_flight_at(records)
    rows = []
    for s in samples:
        flight = bisect.bisect_right(sends, s.at_ns) - bisect.bisect_right(ends, s.at_ns)
        running, waiting = figure(s.values, "running"), figure(s.values, "waiting")
        if flight > 0 and running is not None:
            rows.append((s, flight, running, waiting or 0.0))
    if len(rows) < 2:
        return {"scrapes": len(rows)}
    flight_mean, running_mean = fmean(r[1] for r in rows), fmean(r[2] for r in rows)
    waiting_mean = fmean(r[3] for r in rows)
    first, last = rows[0][0], rows[-1][0]
    ev: dict[str, Scalar] = {
        "scrapes": len(rows),
        "in_flight_mean": round(flight_mean, 2),
        "engine_running_mean": round(running_mean, 2),
        "engine_waiting_mean": round(waiting_mean, 2),
        "not_in_engine_share": round(max(0.0, flight_mean - running_mean - waiting_mean) / flight_mean, 3),
        "kv_usage_max": max((v for r in rows if (v := figure(r[0].values, "kv_usage")) is not None), default=None),
    }
    tokens = [figure(s.values, "generation_tokens") for s in (first, last)]
    if tokens[0] is not None and tokens[1] is not None and last.at_ns > first.at_ns:
        ev["engine_tok_s"] = round((tokens[1] - tokens[0]) / ((last.at_ns - first.at_ns) / 1e9), 1)
    ev.update(_server_means(first, last))
    return ev


def _server_means(first: Sample, last: Sample) -> dict[str, Scalar]:
    """The server's own mean TTFT and queue time over the window, from its histograms' sums and counts."""
    out: dict[str, Scalar] = {}
    for name in ("server_ttft", "queue_time"):
        got = [(figure(s.values, f"{name}_sum"), figure(s.values, f"{name}_count")) for s in (first, last)]
        (s0, c0), (s1, c1) = got
        if None not in (s0, c0, s1, c1) and c1 - c0 > 0:  # type: ignore[operator]
            out[f"{name}_mean_ms"] = round((s1 - s0) / (c1 - c0) * 1000, 2)  # type: ignore[operator]
    return out


def client_tok_s(records: Sequence[RequestRecord]) -> float | None:
    sends, ends = in_flight_at(records)
    if not sends or ends[-1] <= sends[0]:
        return None
    return sum(output_tokens(r) for r in records if r.ok) / ((ends[-1] - sends[0]) / 1e9)


def bottleneck(
    records: Sequence[RequestRecord], samples: Sequence[Sample], clients: Sequence[ClientLoad], open_loop: bool
) -> Bottleneck:
    """The verdict for one step (its measured records, the /metrics scraped beside it, its load processes)."""
    ev = client_evidence(clients, records)
    rate = client_tok_s(records)
    ev["client_tok_s"] = round(rate, 1) if rate is not None else None
    if why := client_limited(ev, open_loop):
        return Bottleneck(
            limit="client",
            reason=f"the load generator was the limit: {why}; its figures measure itself",
            hint="raise --workers, or run servelab on cores the server does not use",
            evidence=ev,
        )
    ev.update(server_evidence(records, samples))
    return _server_side(ev)


def _server_side(ev: dict[str, Scalar]) -> Bottleneck:
    flight, waiting = ev.get("in_flight_mean"), ev.get("engine_waiting_mean")
    running, share, kv = ev.get("engine_running_mean"), ev.get("not_in_engine_share"), ev.get("kv_usage_max")
    if not isinstance(flight, float) or not isinstance(running, float):
        return Bottleneck(
            limit="server",
            reason="the client was not the limit; the server published no running/waiting gauges during the step "
            "to say which part of it was",
            evidence=ev,
        )
    if isinstance(waiting, float) and waiting >= max(1.0, ENGINE_WAITING_SHARE * flight):
        return Bottleneck(
            limit="engine",
            reason=f"the engine was full: {waiting:.1f} requests waiting in its queue on average beside "
            f"{running:.1f} running" + (f", KV cache {kv:.0%} used at most" if isinstance(kv, float) else ""),
            hint="more KV memory (--gpu-memory-utilization, a smaller --max-model-len), a higher --max-num-seqs "
            "if KV is not full, or more GPUs",
            evidence=ev,
        )
    if isinstance(kv, float) and kv >= KV_FULL:
        return Bottleneck(limit="engine", reason=f"the engine's KV cache was {kv:.0%} full", evidence=ev)
    queued = waiting if isinstance(waiting, float) else 0.0
    if isinstance(share, float) and share >= FRONTEND_SHARE and flight - running - queued >= 2:
        return Bottleneck(
            limit="server frontend",
            reason=f"the client had {flight:.1f} requests in flight on average, the engine counted "
            f"{running + queued:.1f} running or waiting: {share:.0%} were in the server's HTTP frontend",
            hint="vLLM: raise --api-server-count (or put more replicas behind a router)",
            evidence=ev,
        )
    return Bottleneck(
        limit="engine",
        reason=f"the engine ran every request the client had in flight ({running:.1f} of {flight:.1f} on average, "
        "none queued): its step time at this batch set the speed",
        evidence=ev,
    )
