"""What one bench step's verdict (:mod:`.verdict`) is judged on: the client's own load and lateness, the engine's
/metrics beside the step on the client's clock, and where the requests spent their time in flight.

The engine's figures are its /metrics series scraped beside the step; the client's in-flight count at each scrape
is read from the step's own records; histogram means and sums are over the whole step (first to last scrape).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from statistics import fmean

from servelab.bench.metrics import Sample, figure
from servelab.core.records import RequestRecord
from servelab.core.results import ClientLoad, Scalar
from servelab.core.summary import output_tokens


def step_evidence(
    records: Sequence[RequestRecord],
    samples: Sequence[Sample],
    clients: Sequence[ClientLoad],
    open_loop: bool,
    frontend_cpu: Sequence[float] = (),
    step_records: Sequence[RequestRecord] | None = None,
) -> dict[str, Scalar]:
    """Every figure the verdict reads, for one step: its measured records, the /metrics scraped beside it, its load
    processes and, for a server on this host, the CPU share of each process holding its port (busiest first). The
    server's figures set the step's records (``step_records``: every phase of a step whose records carry several
    labels, cold and warm) against its counters, which count them all."""
    ev = client_evidence(clients, records)
    rate = client_tok_s(records)
    ev["client_tok_s"] = round(rate, 1) if rate is not None else None
    server = server_evidence(records if step_records is None else step_records, samples)
    ev.update(frontend_evidence(frontend_cpu, server.get("frontend_cpu_reported")))
    ev.update(server)
    if not open_loop:
        ev["client_occupancy"] = occupancy(records, sum(c.in_flight_max for c in clients if c.died is None))
    return ev


def frontend_evidence(on_host: Sequence[float], reported: Scalar) -> dict[str, Scalar]:
    """How busy the server's HTTP frontend was: its own CPU counter when it publishes one (vLLM with one API server:
    that process, wherever the server runs, in a container too), else the processes holding its port on this host
    (busiest first; vLLM's several API servers)."""
    host: dict[str, Scalar] = {}
    if on_host:
        busy = [c for c in on_host if c >= 0.05] or list(on_host[:1])
        host = {"frontend_cpu_from": "host", "frontend_processes": len(busy),
                "frontend_cpu_max": round(on_host[0], 3), "frontend_cpu_mean": round(fmean(busy), 3)}  # fmt: skip
    if not isinstance(reported, float):
        return host
    server: dict[str, Scalar] = {"frontend_cpu_from": "server", "frontend_processes": 1,
                                 "frontend_cpu_max": reported, "frontend_cpu_mean": reported}  # fmt: skip
    if host:
        server["frontend_cpu_host_max"] = host["frontend_cpu_max"]  # the port's busiest holder here, beside it
    return server


def client_evidence(clients: Sequence[ClientLoad], records: Sequence[RequestRecord]) -> dict[str, Scalar]:
    live = [c for c in clients if c.died is None]
    lag = [c.sent_ns - c.scheduled_ns for c in records if c.sent_ns is not None and c.scheduled_ns is not None]
    return {
        "workers": len(clients),
        "client_cpu_max": round(max((c.cpu_share for c in live), default=0.0), 3),
        "loop_late_share_max": round(max((c.loop_late_share for c in live), default=0.0), 3),
        "loop_lag_p99_ms": round(max((c.loop_lag_ms.get("p99", 0.0) for c in live), default=0.0), 3),
        "read_late_p99_ms": round(max((c.read_late_ms.get("p99", 0.0) for c in live), default=0.0), 3),
        "schedule_lag_p99_ms": round(_p99(lag) / 1e6, 3) if lag else None,
    }


def _p99(values: list[int]) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))])


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
    if (tokens := _rate(first, last, "generation_tokens")) is not None:
        ev["engine_tok_s"] = round(tokens, 1)
    if (cpu := _rate(first, last, "frontend_cpu_s")) is not None:
        ev["frontend_cpu_reported"] = round(cpu, 3)
    before = [s for s in samples if sends and s.at_ns <= sends[0]]
    ev.update(_server_means(before[-1] if before else first, samples[-1]))
    ev.update(_engine_held(records, before[-1] if before else first, samples[-1]))
    return ev


def _engine_held(records: Sequence[RequestRecord], first: Sample, last: Sample) -> dict[str, Scalar]:
    """The share of the requests' time in flight (the client's: sent to end) that the engine had them: the
    request-seconds in its queue, prefill and decode over the step (its histograms' sums: inter-token times as
    tokens come, queue and prefill times as requests end), over the client's request-seconds. Low when requests
    waited elsewhere: in the server's frontend, or as replies unread by the client. Needs the inter-token sum.

    Each request's engine time lies inside its client time (queued to last token, one monotonic clock), so the
    share is at most 1 when the counters count this step's requests alone. They count every request that ended
    between the two scrapes: a warm-up whose end was published after the first (108-112% on the embedded engine on
    2026-12-05, before the first scrape was taken after the warm-up), or another client's. So the share is given
    only where the engine finished no more requests in the window than the step sent (its queue-time count), and
    else the count of the others is (``engine_other_requests``), not a share."""
    delta = {n: _moved(first, last, n) for n in ("itl_sum", "queue_time_sum", "prefill_time_sum")}
    client = sum(r.end_ns - r.sent_ns for r in records if r.sent_ns is not None and r.end_ns is not None) / 1e9
    if delta["itl_sum"] is None or client <= 0:
        return {}
    ended = _moved(first, last, "queue_time_count")
    if ended is not None and ended > len(records):
        return {"engine_other_requests": int(ended - len(records))}
    held = sum(v for v in delta.values() if v is not None)
    return {"engine_held_s": round(held, 2), "client_in_flight_s": round(client, 2),
            "engine_held_share": round(held / client, 3)}  # fmt: skip


def _rate(first: Sample, last: Sample, name: str) -> float | None:
    """A counter's rise per second between two scrapes; None when either lacks it or it went back (a restart)."""
    moved = _moved(first, last, name)
    if moved is None or moved < 0 or last.at_ns <= first.at_ns:
        return None
    return moved / ((last.at_ns - first.at_ns) / 1e9)


def _moved(first: Sample, last: Sample, name: str) -> float | None:
    a, b = figure(first.values, name), figure(last.values, name)
    return b - a if a is not None and b is not None else None


def _server_means(first: Sample, last: Sample) -> dict[str, Scalar]:
    """The server's own mean TTFT, queue and prefill time over the step, from its histograms' sums and counts (a
    request's queue and prefill times are published when it ends, so up to the step's last scrape), and the part
    of its TTFT outside the engine's queue and prefill: the frontend's."""
    out: dict[str, Scalar] = {}
    for name in ("server_ttft", "queue_time", "prefill_time"):
        total, count = _moved(first, last, f"{name}_sum"), _moved(first, last, f"{name}_count")
        if total is not None and count is not None and count > 0:
            out[f"{name}_mean_ms"] = round(total / count * 1000, 2)
    ttft, queue, prefill = (out.get(f"{n}_mean_ms") for n in ("server_ttft", "queue_time", "prefill_time"))
    if isinstance(ttft, float) and isinstance(queue, float) and isinstance(prefill, float):
        out["frontend_ttft_ms"] = round(max(0.0, ttft - queue - prefill), 2)
    return out


def client_tok_s(records: Sequence[RequestRecord]) -> float | None:
    """Output tokens of the ok requests over first send to last end."""
    spans = [(r.sent_ns, r.end_ns) for r in records if r.sent_ns is not None and r.end_ns is not None]
    if not spans:
        return None
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return sum(output_tokens(r) for r in records if r.ok) / ((end - start) / 1e9) if end > start else None


def occupancy(records: Sequence[RequestRecord], streams: int) -> float | None:
    """The closed loop's mean requests in flight over its streams, from its first to its last send (after that
    its streams empty as the last requests end); None for a single wave. A session's think time (from an answer to
    its next turn's due time) is idle by design: it is taken out of the time the streams could have been busy, so
    only a stream idle past its turn's due time counts against the client."""
    sends = in_flight_at(records)[0]
    if streams <= 0 or len(sends) < 2 or sends[-1] <= sends[0]:
        return None
    lo, hi = sends[0], sends[-1]
    spans = [(r.sent_ns, r.end_ns) for r in records if r.sent_ns is not None and r.end_ns is not None]
    busy = sum(max(0, min(e, hi) - max(s, lo)) for s, e in spans)
    room = (hi - lo) * streams - _think_time(records, lo, hi)
    return round(min(1.0, busy / room), 3) if room > 0 else None


def _think_time(records: Sequence[RequestRecord], lo: int, hi: int) -> int:
    """Nanoseconds within [lo, hi] that sessions spent between an answer and their next turn's due time."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.labels.session is not None and r.sent_ns is not None:
            turns.setdefault(r.labels.session, []).append(r)
    idle = 0
    for mine in turns.values():
        mine.sort(key=lambda r: r.sent_ns or 0)
        for before, after in itertools.pairwise(mine):
            if before.end_ns is not None and after.scheduled_ns is not None:
                idle += max(0, min(after.scheduled_ns, hi) - max(before.end_ns, lo))
    return idle
