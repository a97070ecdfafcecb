"""The bottleneck verdict from where the requests spent their time: the engine's own clocks (the request-seconds in
its queue, prefill and decode, from its histograms' sums) against the client's request-seconds in flight, and a
closed loop's streams left without a request. The inputs are built to the shape of the H200 runs of 2026-12-03
(docs/bench-scale.md): what the verdict said there and what relieving each side changed."""

from __future__ import annotations

from servelab.bench import bottleneck
from servelab.bench.metrics import Sample
from servelab.core.records import RequestRecord
from servelab.core.results import ClientLoad

S = 10**9


def _step(
    held: float, gap_s: float = 0.0, streams: int = 8, waves: int = 5, itl: bool = True
) -> tuple[list[RequestRecord], list[Sample]]:
    """A closed loop of ``streams`` streams, ``waves`` requests each of 1 s at the client, ``gap_s`` between one's end
    and the stream's next send; the engine's sums move as if it had the requests ``held`` of their time."""
    records = [
        RequestRecord(f"r{i}-{k}", "chat", sent_ns=start, end_ns=start + S, completion_tokens=100)
        for i in range(streams)
        for k in range(waves)
        if (start := 10 * S + int(k * (1 + gap_s) * S) + i * 10**6)
    ]
    client_s = len(records) * 1.0
    first, last = 10 * S, max(r.end_ns or 0 for r in records)
    samples = []
    for t in range(9 * S, last + 2 * S, S // 2):
        done = min(max(t - first, 0), last - first) / (last - first)
        values = {
            "vllm:num_requests_running": float(streams) * held,
            "vllm:num_requests_waiting": 0.0,
            "vllm:generation_tokens_total": 100.0 * len(records) * done,
        }
        if itl:
            values["vllm:inter_token_latency_seconds_sum"] = held * client_s * done
        samples.append(Sample(t, values))
    return records, samples


def _client(cpu: float, late: float = 0.0, lag: float = 1.0, streams: int = 8) -> list[ClientLoad]:
    return [ClientLoad(cpu_share=cpu, loop_late_share=late, loop_lag_ms={"p99": lag}, in_flight_max=streams)]


def test_a_frontend_at_a_full_core_is_named_before_an_engine_holding_the_requests() -> None:
    """One API server at 97% of a core, 64 streams, the engine had the requests 87-90% of their time: four API
    servers raised the rate by 30-56% in the 2026-12-04 run (the engine's inter-token time 4.7 -> 3.9 ms) and not in
    the 2026-12-03 one: the frontend, with the engine near its limit too."""
    records, samples = _step(held=0.88)
    got = bottleneck(records, samples, _client(0.70), False, [0.97])
    assert got.limit == "server frontend", got
    assert got.near == ["engine"] and "88%" in (got.note or "")
    assert "api-server-count" in (got.hint or "")


def test_a_saturated_frontend_is_the_limit_before_a_busy_clients_late_ticks() -> None:
    """One API server at 100% of a core, 256 streams, the engine had the requests 34-42% of their time; the one load
    process was behind in 32% of its ticks at 86% of a core. Four API servers doubled the rate with that same
    process: the frontend, not the client."""
    records, samples = _step(held=0.40)
    got = bottleneck(records, samples, _client(0.855, late=0.317, lag=45.0), False, [1.004])
    assert got.limit == "server frontend", got
    assert "api-server-count" in (got.hint or "") and got.near == ["client"]
    held = bottleneck(*_step(held=0.7), _client(0.855, late=0.317, lag=45.0), False, [1.004])
    assert held.limit == "client" and held.near == ["server frontend", "engine"], held  # the engine had them


def test_a_saturated_load_process_is_named_before_an_engine_holding_the_requests() -> None:
    """Four API servers, one load process: at 97% of a core (1,024 streams, the engine holding 92%) four processes
    added 18%, and at 81% with its loop behind in 13% of its ticks (64 streams, the engine holding 95%) 16%, in the
    2026-12-04 run: the client, the engine near its limit too. At 83% with its loop behind in 6% of its ticks (the
    2026-12-03 run, four processes: -1%) it was not saturated: the engine."""
    records, samples = _step(held=0.92, gap_s=0.05)
    full = bottleneck(records, samples, _client(0.97, late=0.64, lag=236.0), False, [0.79])
    assert full.limit == "client" and full.near == ["engine"], full
    assert "97% of a core" in full.reason and "92%" in (full.note or "")
    busy = bottleneck(records, samples, _client(0.81, late=0.126, lag=25.0), False, [0.57])
    assert busy.limit == "client" and "behind in 13% of its ticks" in busy.reason, busy
    kept_up = bottleneck(records, samples, _client(0.83, late=0.056, lag=26.0), False, [0.53])
    assert kept_up.limit == "engine" and kept_up.near == [], kept_up


def test_a_client_that_leaves_its_streams_idle_is_the_limit_though_the_engine_held_what_it_sent() -> None:
    """A starved load process (behind in 30% of its ticks) sends each stream's next request late: the engine had
    every request it got, but the streams had one in flight 62% of the time: the client."""
    records, samples = _step(held=0.98, gap_s=0.6)
    got = bottleneck(records, samples, _client(0.2, late=0.30, lag=33.0), False)
    assert got.limit == "client", got
    assert "streams had a request in flight" in got.reason
    occupancy = got.evidence["client_occupancy"]
    assert isinstance(occupancy, float) and occupancy < 0.9
    prompt = bottleneck(records, samples, _client(0.2, late=0.01, lag=1.0), False)
    assert prompt.limit == "engine", prompt  # idle streams from a client that was not behind: its own think time


def test_without_the_engines_clocks_the_rules_before_them_still_hold() -> None:
    """No inter-token sum published (another engine, an older vLLM): no held share; a load process at a full core
    is the client, and a frontend at a full core the frontend, as before."""
    records, samples = _step(held=0.9, itl=False)
    got = bottleneck(records, samples, _client(0.95), False, [0.5])
    assert got.limit == "client" and "engine_held_share" not in got.evidence
    assert bottleneck(records, samples, _client(0.3), False, [1.0]).limit == "server frontend"


def test_requests_mostly_outside_the_engine_of_a_remote_server_are_its_frontend() -> None:
    """A server on another host (no process of it to read the CPU of), a client that kept up, and an engine that had
    the requests 40% of their time in flight, its running gauge reading all of them (last-reported, stale under a
    saturated frontend): the frontend, not "the engine ran every request"."""
    records, samples = _step(held=0.40)
    samples = [Sample(s.at_ns, dict(s.values, **{"vllm:num_requests_running": 8.0})) for s in samples]
    got = bottleneck(records, samples, _client(0.3), False)
    assert got.limit == "server frontend", got
    assert "only 40%" in got.reason


def test_streams_idle_a_seventh_of_the_time_behind_a_late_loop_are_the_client() -> None:
    """One load process at 89% of a core behind in 21% of its ticks, its streams busy 85% of the time, beside four API
    servers (one at 95% of a core) and an engine holding 59%: four processes added 31% (2026-12-04): the client."""
    records, samples = _step(held=0.59, gap_s=0.18)
    got = bottleneck(records, samples, _client(0.89, late=0.21, lag=198.0), False, [0.95])
    assert got.limit == "client" and "streams had a request in flight" in got.reason, got
    occupancy = got.evidence["client_occupancy"]
    assert isinstance(occupancy, float) and 0.8 < occupancy < 0.9
    assert "server frontend" in got.near


def test_a_stored_steps_evidence_is_judged_the_same_again() -> None:
    """The verdict is a function of the evidence it stores: judging that evidence again gives the same verdict (how
    benchmarks/gpu/verdicts.py re-judges stored H200 steps with newer rules)."""
    from servelab.bench.verdict import client_note, judge

    for held, cpu, late, front in [(0.88, 0.7, 0.0, 0.97), (0.4, 0.855, 0.317, 1.004), (0.95, 0.3, 0.0, 0.5)]:
        got = bottleneck(*_step(held=held), _client(cpu, late=late, lag=30.0), False, [front])
        again = judge(dict(got.evidence), client_note(got.evidence, open_loop=False))
        assert again == got


def test_the_reports_ceiling_table_names_the_sides_near_their_limits_too() -> None:
    """A verdict with others near their limits shows them in the report's table beside the named limit."""
    from servelab.core.results import Step
    from servelab.core.summary import summarize
    from servelab.report.bench_view import bottleneck_table

    records, samples = _step(held=0.92)
    verdict = bottleneck(records, samples, _client(0.97, late=0.64, lag=236.0), False, [0.5])
    step = Step(target="vllm", scenario="chat@c8", labels={}, summary=summarize(records), bottleneck=verdict)
    (row,) = bottleneck_table([step]).rows
    assert row[1] == "client\n(engine near too)"


def test_one_frontend_process_carrying_more_than_its_share_is_said_with_its_own_hint() -> None:
    """Four API servers, the busiest at 99% of a core: in the H200 runs of 2026-12-04 the busiest of vLLM's four took
    31-50% of a run's requests (they share one listening socket) and the others idled beside it. Uneven (a mean of
    60%): the verdict says so and points at spreading the load; even (a mean of 95%): more API servers."""
    records, samples = _step(held=0.76)
    uneven = bottleneck(records, samples, _client(0.54), False, [0.99, 0.62, 0.45, 0.34])
    assert uneven.limit == "server frontend", uneven
    assert "averaged 60%" in uneven.reason and "spread unevenly" in uneven.reason
    assert "share one listening socket" in (uneven.hint or "") and uneven.evidence["frontend_cpu_mean"] == 0.6
    even = bottleneck(records, samples, _client(0.54), False, [0.99, 0.95, 0.94, 0.92])
    assert even.limit == "server frontend" and "unevenly" not in even.reason
    assert "api-server-count" in (even.hint or "")
    one = bottleneck(records, samples, _client(0.54), False, [0.99, 0.01])
    assert "unevenly" not in one.reason and one.evidence["frontend_processes"] == 1


def test_a_saturated_client_beside_an_engine_holding_nearly_all_is_said_to_share_the_limit() -> None:
    """One load process at 84-98% of a core, the engine holding 86-95% of the requests' time, streams busy 90-95%:
    over three H200 runs four workers changed the rate by -21% to +31% at that evidence. The verdict still names the
    client (with the engine near) but no longer says it alone was the limit; with the engine holding 70% it does."""
    records, samples = _step(held=0.92, gap_s=0.05)
    together = bottleneck(records, samples, _client(0.96, late=0.7, lag=200.0), False, [0.79])
    assert together.limit == "client" and together.near == ["engine"], together
    assert "at their limits together" in together.reason and "92%" in together.reason
    assert "may not raise the rate" in (together.hint or "") and "--confirm" in (together.hint or "")
    alone = bottleneck(*_step(held=0.7, gap_s=0.05), _client(0.96, late=0.7, lag=200.0), False, [0.79])
    assert alone.limit == "client" and alone.reason.startswith("the load generator was the limit"), alone
    assert alone.hint is not None and alone.hint.startswith("raise --workers")


SHARER = """
import os, sys, time
sock_fd, busy = int(sys.argv[1]), sys.argv[2] == "busy"
end = time.monotonic() + 3.0
while time.monotonic() < end:
    if not busy:
        time.sleep(0.05)
"""


def test_processes_sharing_one_listening_socket_are_each_measured() -> None:
    """vLLM's API servers share one listening socket handed down by their parent: every process holding it is found
    and measured, so the evidence has the busy ones' count and mean beside the busiest (here three children holding
    the parent's socket: one spinning, two idle, and the parent itself idle)."""
    import socket
    import subprocess
    import sys
    import time

    from servelab.bench.evidence import step_evidence
    from servelab.engines.local_server import FrontendCpu

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        fd, port = s.fileno(), s.getsockname()[1]
        kids = [subprocess.Popen([sys.executable, "-c", SHARER, str(fd), mode], pass_fds=[fd])
                for mode in ("busy", "idle", "idle")]  # fmt: skip
        try:
            time.sleep(0.5)
            frontend = FrontendCpu(f"http://127.0.0.1:{port}")
            frontend.start()
            assert len(frontend.pids) == 4, frontend.pids  # the parent and its three children
            time.sleep(1.0)
            frontend.sample()
            shares = frontend.shares()
        finally:
            for kid in kids:
                kid.kill()
                kid.wait()
    assert len(shares) == 4 and shares[0] > 0.3 and shares[1] < 0.2, shares
    ev = step_evidence([], [], [], False, shares)
    assert ev["frontend_processes"] == 1 and ev["frontend_cpu_max"] == round(shares[0], 3)
    assert ev["frontend_cpu_mean"] == ev["frontend_cpu_max"]  # one busy: its own mean
