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


def test_an_engine_holding_the_requests_is_the_limit_beside_a_busy_frontend() -> None:
    """One API server at 95% of a core, 64 streams: the engine had the requests 72-75% of their time. Four API
    servers did not raise the rate there (the engine's step time at that batch set it): engine, the frontend named
    as near its limit, not as the limit."""
    records, samples = _step(held=0.74)
    got = bottleneck(records, samples, _client(0.70), False, [0.95])
    assert got.limit == "engine", got
    assert got.evidence["engine_held_share"] == 0.74
    assert "near its limit too" in (got.note or "") and "95%" in (got.note or "")


def test_a_saturated_frontend_is_the_limit_before_a_busy_clients_late_ticks() -> None:
    """One API server at 100% of a core, 256 streams, the engine had the requests 34-42% of their time; the one load
    process was behind in 32% of its ticks at 86% of a core. Four API servers doubled the rate with that same
    process: the frontend, not the client."""
    records, samples = _step(held=0.40)
    got = bottleneck(records, samples, _client(0.855, late=0.317, lag=45.0), False, [1.004])
    assert got.limit == "server frontend", got
    assert "api-server-count" in (got.hint or "")


def test_a_load_process_at_a_full_core_is_not_the_limit_while_the_engine_holds_its_requests() -> None:
    """One load process at 98% of a core, 1,024 streams, four API servers: its streams were busy 90% of the time
    and the engine had the requests 86% of theirs; four processes moved the rate by 3%: engine, the client
    named as near its limit."""
    records, samples = _step(held=0.86, gap_s=0.1)
    got = bottleneck(records, samples, _client(0.98, late=0.85, lag=275.0), False, [0.79])
    assert got.limit == "engine", got
    occupancy = got.evidence["client_occupancy"]
    assert isinstance(occupancy, float) and occupancy > 0.85
    assert "load process used 98%" in (got.note or "")


def test_a_client_that_leaves_its_streams_idle_is_the_limit_though_the_engine_held_what_it_sent() -> None:
    """A starved load process (behind in 30% of its ticks) sends each stream's next request late: the engine had
    every request it got, but the streams had one in flight 62% of the time: the client."""
    records, samples = _step(held=0.98, gap_s=0.6)
    got = bottleneck(records, samples, _client(0.2, late=0.30, lag=33.0), False)
    assert got.limit == "client", got
    assert "streams had a request in flight" in got.reason
    occupancy = got.evidence["client_occupancy"]
    assert isinstance(occupancy, float) and occupancy < 0.8
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
