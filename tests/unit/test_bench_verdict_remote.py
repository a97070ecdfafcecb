"""The verdict for a server this host cannot see into (another machine, a container): its HTTP frontend's CPU from
the server's own ``process_cpu_seconds_total`` (vLLM publishes it for its one API server; with several its
multiprocess registry has none), and the server's own TTFT clock before the client's late reads. The shapes are
those of the H200 runs of 2026-12-04 (docs/bench-scale.md) judged again without the CPU measured on the host: at
one API server and 64 streams the engine held 86-90% of the requests' time and four API servers raised the rate
48%; at 512 streams 1.25 s of the server's 1.29 s mean TTFT was outside its queue and prefill while the client read
15 ms late at p99."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from servelab.bench import Load, bottleneck, run_bench
from servelab.bench.metrics import PROCESS_CPU, Sample, scraped_values
from servelab.bench.verdict import judge
from servelab.core.store import RunStore
from servelab.engines.prometheus import parse_exposition
from servelab.load import Target
from servelab.load.scenarios import load_scenario
from tests.unit.quiet_client import client_never_the_limit
from tests.unit.test_bench_verdict_held import S, _client, _step


def _with_cpu(samples: list[Sample], per_s: float, restart_at: int | None = None) -> list[Sample]:
    """The samples with the serving process's CPU counter rising ``per_s`` core-seconds a second (starting over at
    ``restart_at``: a restarted process)."""
    out = []
    for s in samples:
        since = s.at_ns if restart_at is None or s.at_ns < restart_at else s.at_ns - restart_at
        out.append(Sample(s.at_ns, {**s.values, PROCESS_CPU: 5.0 + per_s * since / S}))
    return out


def test_a_remote_frontend_at_a_full_core_is_named_from_the_servers_own_counter() -> None:
    records, samples = _step(held=0.88)
    blind = bottleneck(records, samples, _client(0.70), False)
    assert blind.limit == "engine", blind  # without the counter: what a remote run at 64 streams was told
    got = bottleneck(records, _with_cpu(samples, 0.97), _client(0.70), False)
    assert got.limit == "server frontend", got
    assert "the server's HTTP process used 97% of a core" in got.reason and got.near == ["engine"]
    assert got.evidence["frontend_cpu_from"] == "server" and got.evidence["frontend_cpu_reported"] == 0.97
    assert "api-server-count" in (got.hint or "")
    idle = bottleneck(records, _with_cpu(samples, 0.30), _client(0.70), False)
    assert idle.limit == "engine" and idle.evidence["frontend_cpu_max"] == 0.3, idle  # a frontend with room


def test_the_servers_own_counter_is_taken_over_a_port_holder_on_this_host() -> None:
    """A server in a container: the process holding the published port here is a proxy (docker-proxy), not the
    server's frontend; the server's counter says what its frontend did."""
    records, samples = _step(held=0.88)
    got = bottleneck(records, _with_cpu(samples, 0.97), _client(0.70), False, [0.08])
    assert got.limit == "server frontend" and got.evidence["frontend_processes"] == 1, got
    assert got.evidence["frontend_cpu_host_max"] == 0.08  # kept beside it
    on_host = bottleneck(records, samples, _client(0.70), False, [0.97, 0.02])
    assert on_host.evidence["frontend_cpu_from"] == "host" and on_host.limit == "server frontend"


def test_a_counter_that_went_back_is_no_figure() -> None:
    records, samples = _step(held=0.88)
    middle = samples[len(samples) // 2].at_ns
    got = bottleneck(records, _with_cpu(samples, 0.97, restart_at=middle), _client(0.70), False)
    assert "frontend_cpu_reported" not in got.evidence and got.limit == "engine", got


def test_the_servers_ttft_outside_its_engine_comes_before_replies_read_late() -> None:
    ev = {
        "workers": 1, "client_cpu_max": 0.702, "loop_late_share_max": 0.115, "loop_lag_p99_ms": 47.535,
        "read_late_p99_ms": 15.352, "client_tok_s": 13004.3, "scrapes": 27, "in_flight_mean": 462.19,
        "engine_running_mean": 295.11, "engine_waiting_mean": 0.0, "not_in_engine_share": 0.361,
        "server_ttft_mean_ms": 1293.03, "queue_time_mean_ms": 0.03, "prefill_time_mean_ms": 39.28,
        "frontend_ttft_ms": 1253.72, "engine_held_share": 0.3, "client_occupancy": 0.994,
    }  # fmt: skip
    got = judge(ev)
    assert got.limit == "server frontend" and "1,254 ms of the server's own 1,293 ms" in got.reason, got
    quick = judge({**ev, "server_ttft_mean_ms": 60.0, "frontend_ttft_ms": 20.0})
    assert quick.limit == "client" and "waiting on the client" in quick.reason, quick  # the server was quick


def test_the_process_counter_is_kept_only_beside_an_engines_series() -> None:
    text = (
        f"# TYPE {PROCESS_CPU} counter\n{PROCESS_CPU} 12.5\n"
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1e9\n"
    )
    assert scraped_values(parse_exposition(text)) == {}  # a process alone is no engine
    engine = text + '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3\n'
    assert scraped_values(parse_exposition(engine)) == {PROCESS_CPU: 12.5, "vllm:num_requests_running": 3.0}


@pytest.mark.parametrize(
    "sim", [["--max-running", 64, "--step-ms", 5, "--frontend-cpu-ms", 40, "--publish-cpu"]], indirect=True
)
def test_a_busy_frontend_on_a_server_this_host_cannot_see_is_named_from_its_counter(
    sim: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """servelab.testing.engine_sim (a FAKE engine, not an LLM: a frontend burning 40 ms of CPU per request on its
    event loop, on demand) publishing its own CPU counter, with this host's /proc look-up of the port's holder
    switched off, as for a server on another machine. The sim's one loop also runs its engine steps, so it idles
    between bursts (83-91% of a core here). The test is about the counter reaching the rule, not about where the
    line sits (the H200 shapes above are), nor about spare CPU: on a busy machine the sim gets less of a core and
    the load process runs late, so the line is a twentieth of a core (the sim burns CPU for every request: any share
    it got is its frontend's) and the client's rules are out of reach (a busy box once read the load process as the
    limit here)."""
    import servelab.bench.verdict as verdict
    import servelab.engines.local_server as local_server

    monkeypatch.setattr(local_server, "local_port", lambda url: None)
    monkeypatch.setattr(verdict, "FRONTEND_CPU", 0.05)
    client_never_the_limit(monkeypatch)
    store = RunStore(tmp_path / "runs.sqlite")
    scenario = replace(load_scenario("code-chat"), concurrency=16)
    result = run_bench(store, [sim], [scenario], Load(requests=150, warmup=1, max_tokens=10, workers=1),
                       scrape_interval=0.1)  # fmt: skip
    (step,) = result.stored.steps
    got = step.bottleneck
    assert got is not None and got.evidence["frontend_cpu_from"] == "server", got
    assert "frontend_cpu_host_max" not in got.evidence  # nothing found here
    assert got.limit == "server frontend" and "the server's HTTP process used" in got.reason, got


def test_a_queue_beside_a_roomy_kv_cache_is_not_called_full() -> None:
    """The evidence of a real step (Laguna S 2.1 on an H200, 16 streams of 2,048-token prompts arriving together,
    2026-12-05): 3.25 requests waited beside 12.75 running while the KV cache was 18% used. They waited for the
    prefill budget, so the verdict must not send the user after KV memory; at a full cache it still does."""
    ev = {
        "workers": 1, "client_cpu_max": 0.121, "loop_late_share_max": 0.013, "loop_lag_p99_ms": 5.724,
        "read_late_p99_ms": 3.258, "schedule_lag_p99_ms": 15.203, "client_tok_s": 823.7, "frontend_cpu_from": "server",
        "frontend_processes": 1, "frontend_cpu_max": 0.089, "frontend_cpu_mean": 0.089, "frontend_cpu_host_max": 0.089,
        "scrapes": 4, "in_flight_mean": 16.0, "engine_running_mean": 12.75, "engine_waiting_mean": 3.25,
        "not_in_engine_share": 0.0, "kv_usage_max": 0.18187469472936368, "engine_tok_s": 810.9,
        "frontend_cpu_reported": 0.089, "server_ttft_mean_ms": 946.72, "queue_time_mean_ms": 288.72,
        "prefill_time_mean_ms": 510.73, "frontend_ttft_ms": 147.27, "engine_held_s": 37.11, "client_in_flight_s": 39.53,
        "engine_held_share": 0.939, "client_occupancy": 0.493,
    }  # fmt: skip
    roomy = judge(ev)
    assert roomy.limit == "engine" and "not for memory" in roomy.reason and "18%" in roomy.reason, roomy
    assert roomy.hint is not None and "--max-num-batched-tokens" in roomy.hint and "KV memory" not in roomy.hint
    full = judge({**ev, "kv_usage_max": 0.97})
    assert full.limit == "engine" and "was full" in full.reason and full.hint and "more KV memory" in full.hint
