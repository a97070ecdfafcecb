"""Which side limited a step: the load generator, the server's HTTP frontend or the engine, with the evidence
(:mod:`.evidence`), and which others were near their own limits beside it (``near``).

The order, from the H200 runs of 2026-12-03 and 2026-12-04 (docs/bench-scale.md: what relieving each side changed):

1. **client**, when a closed loop left its streams without a request a tenth of the time or more while it was
   behind: it sent too little, whatever else was busy.
2. A saturated process in the request's path before the engine: a load process (a full core, or four fifths of one
   with its event loop behind in a tenth of its ticks, or behind in a quarter whatever its CPU: starved) is the
   **client**; a process holding the server's port at one full core (vLLM's API server: parsing, tokenizing,
   streaming back; measured on this host, or from the server's own ``process_cpu_seconds_total``, which vLLM
   publishes for its one API server wherever it runs) is the **server frontend**, said to be uneven when the busy
   ones averaged three quarters of the busiest or less (vLLM's API servers share one listening socket: the busiest of
   four took 31-50% of a run's requests on 2026-12-04, and more API servers help less than their count). Without
   either, a server on another host at one API server and 64 streams looked like the engine (it held 86-90%; four API
   servers raised the rate 48%). When both were, the engine's clocks decide: requests it had less than 60% of their
   time in flight waited in the frontend. A saturated process also slows the engine's own steps: on the H200 at 64
   streams the engine's mean inter-token time was 3.9 ms beside one load process at 81% of a core and 3.4 ms beside
   four, 4.7 ms with one API server at 97% of a core and 3.9 ms with four, while the engine held 86-95% of the
   requests' time in every case; four load processes added 16% there and four API servers 30-56% (an earlier run at
   the same settings: -1% to +10%). So such a process is named first and the engine, when it held the requests, as
   near its limit too (``near``): the two were limits together, and a client beside an engine holding 85% or more is
   said to share the limit (more workers gained -21% to +31% there).
3. **engine**: it had the client's requests for most of the time they were in flight (its own clocks: the
   request-seconds in its queue, prefill and decode, from its histograms' sums, against the client's): its step
   time at this batch set the speed; or it was full (a queue in its scheduler, its KV cache).
4. The rest: the server's own TTFT mostly outside its queue and prefill is the frontend (a client reading late
   does not move the server's clock: on the H200 at one API server and 512 streams, 1.25 s of the server's 1.29 s
   beside reads 15 ms late at p99); replies left unread by a late client are the client; requests in flight that
   the engine did not count, the frontend; else the engine if it ran every request, **server** if it published
   nothing to say which part.

Apart from the limit, a client whose event loop ran late or that read the received bytes late has its latency
stamps off by as much: the verdict says so (``note``) whatever limited the throughput.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.evidence import step_evidence
from servelab.bench.metrics import Sample
from servelab.core.figures import pct_text
from servelab.core.records import RequestRecord
from servelab.core.results import Bottleneck, ClientLoad, Limit, Scalar

CLIENT_CPU = 0.90  # of one core, any worker
CLIENT_BUSY_CPU = 0.80  # of one core, with its loop behind in CLIENT_BUSY_LATE_SHARE of its ticks: saturated
CLIENT_BUSY_LATE_SHARE = 0.10
CLIENT_LATE_SHARE = 0.25  # of a 10 ms timer's ticks 5 ms late or more: the loop ran behind (busy or starved)
CLIENT_LOOP_LAG_MS = 20.0  # p99 of a 10 ms timer's lateness
CLIENT_READ_LATE_MS = 5.0  # p99 of kernel receive -> the client's read
SCHEDULE_LAG_MS = 10.0  # p99 of an open loop's sent - due
FRONTEND_CPU = 0.90  # of one core, the busiest process holding the server's port (or the server's own CPU counter)
FRONTEND_CPU_ONE_THREAD = 1.15  # above: the process runs several threads' work, not a one-thread frontend
FRONTEND_SHARE = 0.15  # of the client's in-flight requests not seen by the engine
FRONTEND_TTFT_SHARE = 0.5  # of the server's own mean TTFT spent outside its queue and prefill ...
FRONTEND_TTFT_MS = 250.0  # ... and at least this long
MIN_SCRAPES = 4  # an in-flight comparison on fewer scrapes says nothing
ENGINE_WAITING_SHARE = 0.05  # of the in-flight requests waiting in the engine's queue
KV_FULL = 0.95
KV_ROOMY = 0.80  # a KV cache never above this while requests queued: they did not wait for memory
ENGINE_HELD_TOGETHER = 0.85  # held this much beside a saturated client: both at their limits
ENGINE_HELD = 0.6  # of the client's request-seconds in flight spent in the engine (queue, prefill, decode)
CLIENT_OCCUPANCY = 0.9  # of a closed loop's streams with a request in flight, between its first and last send
FRONTEND_UNEVEN = 0.75  # the busy frontend processes' mean CPU at or under this share of the busiest's: uneven
FRONTEND_HINT = "vLLM: raise --api-server-count (or put more replicas behind a router)"
FRONTEND_UNEVEN_HINT = (
    "its frontend processes share one listening socket and each keeps the connections it accepted first (bursts of "
    "new connections land on one): more processes help less than their count; replicas behind a router, or a "
    "client that opens its connections spread out (more --workers), spread the load"
)
CLIENT_HINT = "raise --workers, or run servelab on cores the server does not use"
CLIENT_TOGETHER_HINT = "more workers may not raise the rate, the engine being at its limit too: --confirm tests it"


def bottleneck(
    records: Sequence[RequestRecord],
    samples: Sequence[Sample],
    clients: Sequence[ClientLoad],
    open_loop: bool,
    frontend_cpu: Sequence[float] = (),
    step_records: Sequence[RequestRecord] | None = None,
) -> Bottleneck:
    """The verdict for one step (its measured records, the /metrics scraped beside it, its load processes, and
    for a server on this host the CPU share of each process holding its port; ``step_records``: every phase of a
    step whose records carry several labels, which the server's counters count together)."""
    ev = step_evidence(records, samples, clients, open_loop, frontend_cpu, step_records)
    return judge(ev, client_note(ev, open_loop))


def judge(ev: dict[str, Scalar], note: str | None = None) -> Bottleneck:
    """The verdict from a step's evidence alone (so a stored step can be judged again): the order above."""
    if why := _streams_left_idle(ev):
        return _named("client", why, note, ev)
    client, front, held = client_limited(ev), _frontend_cpu(ev), ev.get("engine_held_share")
    if client and front and _frontend_held_them(ev, held):
        client = None
    if client:
        return _named("client", client, note, ev)
    if (named := _server_named(ev, note)) is not None:
        return named
    if why := _frontend_ttft(ev):  # the server's own clock: a client reading late does not move it
        return _named("server frontend", why, note, ev)
    if why := _replies_waiting_on_client(ev):
        return _named("client", why, note, ev)
    return _server_side(ev, note)


def judge_server_side(ev: dict[str, Scalar], note: str | None = None) -> Bottleneck:
    """The verdict once the client is known not to be the limit (relieving it changed nothing): the server's
    frontend, the engine, or the server as a whole, from the same evidence."""
    return _server_named(ev, note) or _server_side(ev, note)


def _server_named(ev: dict[str, Scalar], note: str | None) -> Bottleneck | None:
    """A saturated frontend, a full engine, or an engine that held the requests: the server side with its clocks."""
    if front := _frontend_cpu(ev):
        return _named("server frontend", front, note, ev)
    if (full := _engine_full(ev)) is not None:
        said, near = _also(ev, "engine", note)
        return full.model_copy(update={"note": said, "near": near})
    held = ev.get("engine_held_share")
    if isinstance(held, float) and held >= ENGINE_HELD:
        return _named("engine", _engine_had(held), note, ev)
    return None


def _engine_had(held: float) -> str:
    return (
        f"the engine had the requests for {pct_text(held)} of the time they were in flight (its queue, prefill and "
        "decode, from its own clocks): its step time at this batch set the speed"
    )


def _frontend_held_them(ev: dict[str, Scalar], held: Scalar | None) -> bool:
    """Both a load process and the frontend saturated: the frontend is the limit when the engine had the requests
    less than 60% of their time (they waited in the frontend); without the engine's clocks, when the client was
    only behind in its ticks, not busy."""
    if isinstance(held, float):
        return held < ENGINE_HELD
    return not (_client_cpu(ev) or _client_busy(ev))


def client_limited(ev: dict[str, Scalar]) -> str | None:
    """Why a load process was saturated, or None: a full core, four fifths of one with its event loop behind in a
    tenth of its ticks, or its loop behind in a quarter of them whatever its CPU (starved by something else on its
    cores)."""
    return _client_cpu(ev) or _client_busy(ev) or _client_late(ev)


def _client_cpu(ev: dict[str, Scalar]) -> str | None:
    cpu = ev.get("client_cpu_max")
    return f"a load process used {cpu:.0%} of a core" if isinstance(cpu, float) and cpu >= CLIENT_CPU else None


def _client_busy(ev: dict[str, Scalar]) -> str | None:
    cpu, late = ev.get("client_cpu_max"), ev.get("loop_late_share_max")
    if isinstance(cpu, float) and isinstance(late, float) and cpu >= CLIENT_BUSY_CPU and late >= CLIENT_BUSY_LATE_SHARE:
        return f"a load process used {cpu:.0%} of a core and its event loop was behind in {late:.0%} of its ticks"
    return None


def _client_late(ev: dict[str, Scalar]) -> str | None:
    late = ev.get("loop_late_share_max")
    if isinstance(late, float) and late >= CLIENT_LATE_SHARE:
        return f"a load process's event loop was 5 ms or more behind in {late:.0%} of its 10 ms ticks"
    return None


def _near(ev: dict[str, Scalar], named: Limit) -> list[tuple[Limit, str]]:
    """The other sides near their own limits beside the named one: relieving the named one moves the limit there."""
    held = ev.get("engine_held_share")
    sides: list[tuple[Limit, str | None]] = [
        ("client", client_limited(ev)),
        ("server frontend", _frontend_cpu(ev)),
        ("engine", f"the engine had the requests {pct_text(held)} of their time in flight"
         if isinstance(held, float) and held >= ENGINE_HELD else None),
    ]  # fmt: skip
    return [(side, why) for side, why in sides if why and side != named]


def _also(ev: dict[str, Scalar], limit: Limit, note: str | None) -> tuple[str | None, list[Limit]]:
    """The note (the client's own delay, then what else was near its limit) and the sides near their limits."""
    near = _near(ev, limit)
    also = f"near its limit too: {'; '.join(why for _, why in near)}" if near else None
    return _joined(note, also), [side for side, _ in near]


def _named(limit: Limit, why: str, note: str | None, ev: dict[str, Scalar]) -> Bottleneck:
    reason = _client_reason(why, ev) if limit == "client" else why
    hint = _client_hint(ev) if limit == "client" else _frontend_hint(ev) if limit == "server frontend" else None
    said, near = _also(ev, limit, note)
    return Bottleneck(limit=limit, reason=reason, hint=hint, note=said, near=near, evidence=ev)


def _client_reason(why: str, ev: dict[str, Scalar]) -> str:
    if (held := _engine_with_client(ev)) is not None:
        return (
            f"the load generator and the engine were at their limits together: {why}, and the engine had the "
            f"requests {pct_text(held)} of their time in flight"
        )
    return f"the load generator was the limit: {why}"


def _client_hint(ev: dict[str, Scalar]) -> str:
    return CLIENT_TOGETHER_HINT if _engine_with_client(ev) is not None else CLIENT_HINT


def _engine_with_client(ev: dict[str, Scalar]) -> float | None:
    """The engine's held share when it held the requests nearly all their time beside a saturated client whose
    streams were busy: the two at their limits together (on the H200, four workers then gained -21% to +31% from
    day to day); else None."""
    held, busy = ev.get("engine_held_share"), ev.get("client_occupancy")
    busy_enough = not isinstance(busy, float) or busy >= CLIENT_OCCUPANCY
    return held if isinstance(held, float) and held >= ENGINE_HELD_TOGETHER and busy_enough else None


def _frontend_hint(ev: dict[str, Scalar]) -> str:
    return f"vLLM: {FRONTEND_UNEVEN_HINT}" if _frontend_uneven(ev) else FRONTEND_HINT


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


def _streams_left_idle(ev: dict[str, Scalar]) -> str | None:
    """A closed loop that left its streams without a request much of the time, while it was itself busy or behind:
    the engine had what was sent, but the client sent too little."""
    occupancy = ev.get("client_occupancy")
    behind = client_limited(ev) or ("its event loop or its reads ran late" if _client_behind(ev) else None)
    if isinstance(occupancy, float) and occupancy < CLIENT_OCCUPANCY and behind:
        return f"its streams had a request in flight {occupancy:.0%} of the time, and it was behind: {behind}"
    return None


def _joined(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


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
    if not (isinstance(cpu, float) and FRONTEND_CPU <= cpu <= FRONTEND_CPU_ONE_THREAD):
        return None
    if ev.get("frontend_cpu_from") == "server":
        said = f"the server's HTTP process used {cpu:.0%} of a core (its own process_cpu_seconds_total)"
    else:
        said = f"a process holding the server's port used {cpu:.0%} of a core ({procs} busy)"
    if _frontend_uneven(ev):
        said += f" while they averaged {ev['frontend_cpu_mean']:.0%}: the requests were spread unevenly over them"
    return said


def _frontend_uneven(ev: dict[str, Scalar]) -> bool:
    """Several frontend processes, the busiest saturated and their mean well below it: one carried more than its
    share (vLLM's API servers share one listening socket; which accepts a connection keeps its requests)."""
    cpu, mean, procs = ev.get("frontend_cpu_max"), ev.get("frontend_cpu_mean"), ev.get("frontend_processes")
    return (
        isinstance(procs, int) and procs > 1 and isinstance(cpu, float) and isinstance(mean, float)
        and mean <= FRONTEND_UNEVEN * cpu
    )  # fmt: skip


def _frontend_ttft(ev: dict[str, Scalar]) -> str | None:
    """The server's own mean TTFT mostly spent outside its engine's queue and prefill: in its frontend."""
    ttft, front = ev.get("server_ttft_mean_ms"), ev.get("frontend_ttft_ms")
    if (
        isinstance(ttft, float)
        and isinstance(front, float)
        and front >= max(FRONTEND_TTFT_MS, FRONTEND_TTFT_SHARE * ttft)
    ):
        return f"{front:,.0f} ms of the server's own {ttft:,.0f} ms mean TTFT was outside its queue and prefill"
    return None


def _frontend(ev: dict[str, Scalar]) -> str | None:
    """Why the server's HTTP frontend was the limit, from the server's own clocks or the in-flight counts."""
    if why := _frontend_ttft(ev):
        return why
    if (gap := _in_flight_gap(ev)) is not None:
        flight, running, queued = gap
        return (
            f"the client had {flight:.1f} requests in flight on average, the engine counted "
            f"{running:.1f} running and {queued:.1f} waiting: {ev['not_in_engine_share']:.0%} were in the frontend"
        )
    held = ev.get("engine_held_share")
    if isinstance(held, float) and held < ENGINE_HELD:  # reached once the client was found keeping up
        return (
            f"the engine had the requests only {pct_text(held)} of the time they were in flight (its own clocks) while "
            "the client kept up: the rest they spent in the server's frontend (or on the network to it)"
        )
    return None


def _server_side(ev: dict[str, Scalar], note: str | None) -> Bottleneck:
    """Nothing saturated on this host and no engine clocks: the in-flight counts and the server's own TTFT."""
    flight, running = ev.get("in_flight_mean"), ev.get("engine_running_mean")
    if why := _frontend(ev):
        return _named("server frontend", why, note, ev)
    if not isinstance(flight, float) or not isinstance(running, float):
        why = "the client was not the limit; the server published no running/waiting gauges during the step to say "
        return _named("server", why + "which part of it was", note, ev)
    why = (
        f"the engine ran every request the client had in flight ({flight:.1f} on average, its gauge read "
        f"{running:.1f} running, none queued): its step time at this batch set the speed"
    )
    return _named("engine", why, note, ev)


def _engine_full(ev: dict[str, Scalar]) -> Bottleneck | None:
    """A queue in the engine's scheduler: beside a KV cache that was never near full, the requests waited for the
    step's token budget (prefill chunks), and more KV memory would not help; else for room in the batch or KV."""
    flight, waiting = ev.get("in_flight_mean"), ev.get("engine_waiting_mean")
    running, kv = ev.get("engine_running_mean"), ev.get("kv_usage_max")
    if isinstance(waiting, float) and isinstance(flight, float) and waiting >= max(1.0, ENGINE_WAITING_SHARE * flight):
        beside = f" beside {running:.1f} running" if isinstance(running, float) else ""
        if isinstance(kv, float) and kv < KV_ROOMY:
            return Bottleneck(
                limit="engine",
                reason=f"the engine queued requests ({waiting:.1f} waiting on average{beside}) while its KV cache was "
                f"{kv:.0%} used at most: they waited for its per-step token budget (prefill chunks) or its "
                "sequence limit, not for memory",
                hint="a larger --max-num-batched-tokens, a higher --max-num-seqs if the running count sat at it, "
                "or requests arriving less at once",
                evidence=ev,
            )
        return Bottleneck(
            limit="engine",
            reason=f"the engine was full: {waiting:.1f} requests waiting in its queue on average{beside}"
            + (f", KV cache {kv:.0%} used at most" if isinstance(kv, float) else ""),
            hint="more KV memory (--gpu-memory-utilization, a smaller --max-model-len), a higher --max-num-seqs "
            "if KV is not full, or more GPUs",
            evidence=ev,
        )
    if isinstance(kv, float) and kv >= KV_FULL:
        return Bottleneck(limit="engine", reason=f"the engine's KV cache was {kv:.0%} full", evidence=ev)
    return None
