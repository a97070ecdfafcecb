"""Which side limited a step: the load generator, the server's HTTP frontend or the engine, with the evidence.

- **client**: a closed loop left its streams without a request much of the time while it was behind; or, unless
  the engine's clocks show it had the requests most of their time (then the client is only named as near its
  limit), a load-generating process used (nearly) a full core, or its event loop ran behind in a quarter of its
  ticks or more (busy, or starved of CPU by something else on its cores): the load it offered was its own ceiling.
- **engine**: the engine had the client's requests for most of the time they were in flight (its own clocks: the
  request-seconds in its queue, prefill and decode, from its histograms' sums, against the client's): whatever
  else was busy, its step time at this batch set the speed (measured on the H200: a frontend at 95% of a core or a
  load process at 89-98% beside an engine holding 79-98% barely moved the rate when relieved); also when requests
  queue in the engine's scheduler (its ``waiting`` gauge), its KV cache is full, or it ran every request the client
  had in flight.
- **server frontend**: the server's HTTP process (vLLM's API server: parsing, tokenizing, streaming back) was
  the ceiling: on this host, a process holding the target's port used (nearly) a full core; from /metrics, most of
  the server's own TTFT was spent outside the engine's queue and prefill, the client had more requests in flight
  than the engine counted running or waiting, or (a client that kept up) the engine's clocks show it had the
  requests less than 60% of their time.
- **server**: the client was not the limit and the server publishes no /metrics to say which part was.

Apart from the limit, a client whose event loop ran late or that read the received bytes late has its latency
stamps off by as much: the verdict says so (``note``) whatever limited the throughput.

The engine's figures are its /metrics series scraped beside the step on the client's clock; the client's in-flight
count at each scrape is read from the step's own records; histogram means are over the whole step.
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
CLIENT_LATE_SHARE = 0.25  # of a 10 ms timer's ticks 5 ms late or more: the loop ran behind (busy or starved)
CLIENT_LOOP_LAG_MS = 20.0  # p99 of a 10 ms timer's lateness
CLIENT_READ_LATE_MS = 5.0  # p99 of kernel receive -> the client's read
SCHEDULE_LAG_MS = 10.0  # p99 of an open loop's sent - due
FRONTEND_CPU = 0.90  # of one core, the busiest process holding the server's port (a server on this host)
FRONTEND_CPU_ONE_THREAD = 1.15  # above: the process runs several threads' work, not a one-thread frontend
FRONTEND_SHARE = 0.15  # of the client's in-flight requests not seen by the engine
FRONTEND_TTFT_SHARE = 0.5  # of the server's own mean TTFT spent outside its queue and prefill ...
FRONTEND_TTFT_MS = 250.0  # ... and at least this long
MIN_SCRAPES = 4  # an in-flight comparison on fewer scrapes says nothing
ENGINE_WAITING_SHARE = 0.05  # of the in-flight requests waiting in the engine's queue
KV_FULL = 0.95
ENGINE_HELD = 0.6  # of the client's request-seconds in flight spent in the engine (queue, prefill, decode)
CLIENT_OCCUPANCY = 0.8  # of a closed loop's streams with a request in flight, between its first and last send


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


def client_limited(ev: dict[str, Scalar]) -> str | None:
    """Why the client was the throughput limit, or None: a load process at a full core, or one whose event loop
    ran behind most of the time (starved of CPU by something else on its cores, or busy)."""
    return _client_cpu(ev) or _client_late(ev)


def _client_cpu(ev: dict[str, Scalar]) -> str | None:
    cpu = ev["client_cpu_max"]
    return f"a load process used {cpu:.0%} of a core" if isinstance(cpu, float) and cpu >= CLIENT_CPU else None


def _client_late(ev: dict[str, Scalar]) -> str | None:
    late = ev["loop_late_share_max"]
    if isinstance(late, float) and late >= CLIENT_LATE_SHARE:
        return f"a load process's event loop was 5 ms or more behind in {late:.0%} of its 10 ms ticks"
    return None


def client_note(ev: dict[str, Scalar], open_loop: bool) -> str | None:
    """How far the client's own lateness moved its latency stamps, where it did."""
    lag, late, sched = (ev[k] for k in ("loop_lag_p99_ms", "read_late_p99_ms", "schedule_lag_p99_ms"))
    said = []
    if isinstance(lag, float) and lag >= CLIENT_LOOP_LAG_MS:
        said.append(f"its event loop ran {lag:.1f} ms late")
    if isinstance(late, float) and late >= CLIENT_READ_LATE_MS:
        said.append(f"it read received bytes {late:.1f} ms late")
    if open_loop and isinstance(sched, float) and sched >= SCHEDULE_LAG_MS:
        said.append(f"requests went out {sched:.1f} ms after they were due")
    if not said:
        return None
    return f"the load generator's latency figures carry its own delay ({', '.join(said)}, p99): raise --workers"


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
    before = [s for s in samples if sends and s.at_ns <= sends[0]]
    ev.update(_server_means(before[-1] if before else first, samples[-1]))
    ev.update(_engine_held(records, before[-1] if before else first, samples[-1]))
    return ev


def _engine_held(records: Sequence[RequestRecord], first: Sample, last: Sample) -> dict[str, Scalar]:
    """The share of the requests' time in flight (the client's: sent to end) that the engine had them: the
    request-seconds in its queue, prefill and decode over the step (its histograms' sums: inter-token times as
    tokens come, queue and prefill times as requests end), over the client's request-seconds. Low when requests
    waited elsewhere: in the server's frontend, or as replies unread by the client. Needs the inter-token sum;
    counts every client of the server, so another load beside this one raises it."""
    delta = {n: _moved(first, last, n) for n in ("itl_sum", "queue_time_sum", "prefill_time_sum")}
    client = sum(r.end_ns - r.sent_ns for r in records if r.sent_ns is not None and r.end_ns is not None) / 1e9
    if delta["itl_sum"] is None or client <= 0:
        return {}
    held = sum(v for v in delta.values() if v is not None)
    return {"engine_held_s": round(held, 2), "client_in_flight_s": round(client, 2),
            "engine_held_share": round(held / client, 3)}  # fmt: skip


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


def bottleneck(
    records: Sequence[RequestRecord],
    samples: Sequence[Sample],
    clients: Sequence[ClientLoad],
    open_loop: bool,
    frontend_cpu: Sequence[float] = (),
) -> Bottleneck:
    """The verdict for one step (its measured records, the /metrics scraped beside it, its load processes, and
    for a server on this host the CPU share of each process holding its port)."""
    ev = client_evidence(clients, records)
    rate = client_tok_s(records)
    ev["client_tok_s"] = round(rate, 1) if rate is not None else None
    if frontend_cpu:
        ev["frontend_processes"] = len([c for c in frontend_cpu if c >= 0.05]) or 1
        ev["frontend_cpu_max"] = round(frontend_cpu[0], 3)
    note = client_note(ev, open_loop)
    ev.update(server_evidence(records, samples))
    held = ev.get("engine_held_share")
    if not open_loop:
        ev["client_occupancy"] = _occupancy(records, sum(c.in_flight_max for c in clients if c.died is None))
    if isinstance(held, float) and held >= ENGINE_HELD:
        if why := _streams_left_idle(ev):
            return _client_limit(why, note, ev)
        return _engine_side(ev, _joined(note, _also_busy(ev)))
    if why := _client_cpu(ev):
        return _client_limit(why, note, ev)
    if why := _frontend_cpu(ev):
        return Bottleneck(limit="server frontend", reason=why, hint=FRONTEND_HINT, note=note, evidence=ev)
    if why := _client_late(ev) or _replies_waiting_on_client(ev):
        return _client_limit(why, note, ev)
    return _server_side(ev).model_copy(update={"note": note})


def _occupancy(records: Sequence[RequestRecord], streams: int) -> float | None:
    """The closed loop's mean requests in flight over its streams, from its first to its last send (after that
    its streams empty as the last requests end); None for a single wave."""
    sends = in_flight_at(records)[0]
    if streams <= 0 or len(sends) < 2 or sends[-1] <= sends[0]:
        return None
    lo, hi = sends[0], sends[-1]
    spans = [(r.sent_ns, r.end_ns) for r in records if r.sent_ns is not None and r.end_ns is not None]
    busy = sum(max(0, min(e, hi) - max(s, lo)) for s, e in spans)
    return round(busy / (hi - lo) / streams, 3)


def _streams_left_idle(ev: dict[str, Scalar]) -> str | None:
    """A closed loop that left its streams without a request much of the time, while it was itself busy or behind:
    the engine had what was sent, but the client sent too little."""
    occupancy = ev.get("client_occupancy")
    behind = client_limited(ev) or ("its event loop or its reads ran late" if _client_behind(ev) else None)
    if isinstance(occupancy, float) and occupancy < CLIENT_OCCUPANCY and behind:
        return (
            f"its streams had a request in flight {occupancy:.0%} of the time (the engine had those "
            f"{ev['engine_held_share']:.0%} of theirs), and it was behind: {behind}"
        )
    return None


def _also_busy(ev: dict[str, Scalar]) -> str | None:
    """What was near its own limit beside an engine that held the requests: it would be next, not the limit."""
    said = [why for why in (client_limited(ev), _frontend_cpu(ev)) if why]
    return f"near its limit too, not what set the rate: {'; '.join(said)}" if said else None


def _joined(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def _client_limit(why: str, note: str | None, ev: dict[str, Scalar]) -> Bottleneck:
    return Bottleneck(
        limit="client",
        reason=f"the load generator was the limit: {why}",
        hint="raise --workers, or run servelab on cores the server does not use",
        note=note,
        evidence=ev,
    )


def _client_behind(ev: dict[str, Scalar]) -> bool:
    lag, late = ev.get("loop_lag_p99_ms"), ev.get("read_late_p99_ms")
    return (isinstance(lag, float) and lag >= CLIENT_LOOP_LAG_MS) or (
        isinstance(late, float) and late >= CLIENT_READ_LATE_MS
    )


def _replies_waiting_on_client(ev: dict[str, Scalar]) -> str | None:
    """Requests the client counts in flight that the engine no longer runs, while the client read its bytes late:
    their replies were in the client's own socket buffers, not queued in the server's frontend."""
    if (gap := _in_flight_gap(ev)) is None or not _client_behind(ev):
        return None
    flight, running, queued = gap
    return (
        f"it had {flight:.1f} requests in flight on average where the engine counted {running:.1f} running and "
        f"{queued:.1f} waiting, and it read what had arrived late (event loop {ev['loop_lag_p99_ms']} ms, reads "
        f"{ev['read_late_p99_ms']} ms, p99): the replies were waiting on the client"
    )


def _in_flight_gap(ev: dict[str, Scalar]) -> tuple[float, float, float] | None:
    """The client's mean in-flight count, the engine's running and waiting, where the engine saw far fewer."""
    flight, share, running, scrapes = (ev.get(k) for k in ("in_flight_mean", "not_in_engine_share",
                                                           "engine_running_mean", "scrapes"))  # fmt: skip
    queued = ev.get("engine_waiting_mean")
    queued = queued if isinstance(queued, float) else 0.0
    if (
        isinstance(flight, float) and isinstance(share, float) and isinstance(running, float)
        and isinstance(scrapes, int) and scrapes >= MIN_SCRAPES and share >= FRONTEND_SHARE
        and flight - running - queued >= 2
    ):  # fmt: skip
        return flight, running, queued
    return None


def _frontend_cpu(ev: dict[str, Scalar]) -> str | None:
    """A process holding the server's port at one full core: a frontend bound to one thread (a Python server's
    event loop). A process using several cores is computing (llama-server's engine runs in its HTTP process)."""
    cpu, procs = ev.get("frontend_cpu_max"), ev.get("frontend_processes")
    if isinstance(cpu, float) and FRONTEND_CPU <= cpu <= FRONTEND_CPU_ONE_THREAD:
        return f"a process holding the server's port used {cpu:.0%} of a core ({procs} busy)"
    return None


def _frontend(ev: dict[str, Scalar]) -> str | None:
    """Why the server's HTTP frontend was the limit, from the server's own clocks or the in-flight counts."""
    ttft, front = ev.get("server_ttft_mean_ms"), ev.get("frontend_ttft_ms")
    if (
        isinstance(ttft, float)
        and isinstance(front, float)
        and front >= max(FRONTEND_TTFT_MS, FRONTEND_TTFT_SHARE * ttft)
    ):
        return f"{front:,.0f} ms of the server's own {ttft:,.0f} ms mean TTFT was outside its queue and prefill"
    if (gap := _in_flight_gap(ev)) is not None:
        flight, running, queued = gap
        return (
            f"the client had {flight:.1f} requests in flight on average, the engine counted "
            f"{running:.1f} running and {queued:.1f} waiting: {ev['not_in_engine_share']:.0%} were in the frontend"
        )
    held = ev.get("engine_held_share")
    if isinstance(held, float) and held < ENGINE_HELD:  # reached once the client was found keeping up
        return (
            f"the engine had the requests only {held:.0%} of the time they were in flight (its own clocks) while "
            "the client kept up: the rest they spent in the server's frontend (or on the network to it)"
        )
    return None


FRONTEND_HINT = "vLLM: raise --api-server-count (or put more replicas behind a router)"


def _server_side(ev: dict[str, Scalar]) -> Bottleneck:
    flight, running = ev.get("in_flight_mean"), ev.get("engine_running_mean")
    if why := _frontend_cpu(ev):
        return Bottleneck(limit="server frontend", reason=why, hint=FRONTEND_HINT, evidence=ev)
    if not isinstance(flight, float) or not isinstance(running, float):
        if why := _frontend(ev):
            return Bottleneck(limit="server frontend", reason=why, hint=FRONTEND_HINT, evidence=ev)
        return Bottleneck(
            limit="server",
            reason="the client was not the limit; the server published no running/waiting gauges during the step "
            "to say which part of it was",
            evidence=ev,
        )
    if (full := _engine_full(ev)) is not None:
        return full
    if why := _frontend(ev):
        return Bottleneck(limit="server frontend", reason=why, hint=FRONTEND_HINT, evidence=ev)
    return Bottleneck(
        limit="engine",
        reason=f"the engine ran every request the client had in flight ({running:.1f} of {flight:.1f} on average, "
        "none queued): its step time at this batch set the speed",
        evidence=ev,
    )


def _engine_side(ev: dict[str, Scalar], note: str | None) -> Bottleneck:
    """The engine had the requests most of the time they were in flight: full (queue, KV) or at its step time."""
    if (full := _engine_full(ev)) is not None:
        return full.model_copy(update={"note": note})
    return Bottleneck(
        limit="engine",
        reason=f"the engine had the requests for {ev['engine_held_share']:.0%} of the time they were in flight "
        "(its queue, prefill and decode, from its own clocks): its step time at this batch set the speed",
        note=note,
        evidence=ev,
    )


def _engine_full(ev: dict[str, Scalar]) -> Bottleneck | None:
    flight, waiting = ev.get("in_flight_mean"), ev.get("engine_waiting_mean")
    running, kv = ev.get("engine_running_mean"), ev.get("kv_usage_max")
    if isinstance(waiting, float) and isinstance(flight, float) and waiting >= max(1.0, ENGINE_WAITING_SHARE * flight):
        return Bottleneck(
            limit="engine",
            reason=f"the engine was full: {waiting:.1f} requests waiting in its queue on average"
            + (f" beside {running:.1f} running" if isinstance(running, float) else "")
            + (f", KV cache {kv:.0%} used at most" if isinstance(kv, float) else ""),
            hint="more KV memory (--gpu-memory-utilization, a smaller --max-model-len), a higher --max-num-seqs "
            "if KV is not full, or more GPUs",
            evidence=ev,
        )
    if isinstance(kv, float) and kv >= KV_FULL:
        return Bottleneck(limit="engine", reason=f"the engine's KV cache was {kv:.0%} full", evidence=ev)
    return None
