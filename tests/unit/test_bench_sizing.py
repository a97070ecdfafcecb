"""A verdict needs evidence, and a step is sized for its question: no bottleneck verdict for a step with no
successful request or one that never had its concurrency in flight (it says why instead); a concurrent step sends
enough requests to hold its streams; an SLO level sends what its attainment target needs."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.bench import Load, run_bench, search_slo, sized, slo_requests
from servelab.bench.sizing import HOLD_WAVES, max_in_flight, no_verdict
from servelab.bench.slo import SLO
from servelab.core.records import ErrorClass, RequestRecord
from servelab.core.results import BenchRun, load_result
from servelab.core.store import RunStore
from servelab.load import Target
from servelab.load.scenarios import load_scenario
from tests.unit.quiet_client import client_never_the_limit

S = 10**9


def _record(i: int, sent: int, end: int, ok: bool = True) -> RequestRecord:
    r = RequestRecord(f"r{i}", "chat", sent_ns=sent, end_ns=end, completion_tokens=10)
    if not ok:
        r.error = ErrorClass.HTTP_5XX
    return r


def test_a_step_whose_every_request_failed_gets_no_verdict() -> None:
    failed = [_record(i, i * S, i * S + S, ok=False) for i in range(4)]
    assert no_verdict(failed, 4) == "no verdict: none of its 4 requests succeeded, so no load ran to be limited"
    assert no_verdict([], 1) == "no verdict: nothing was measured"


def test_a_step_that_never_had_its_streams_in_flight_gets_no_verdict() -> None:
    three = [_record(i, 0, S) for i in range(3)]  # 3 requests for 4 streams: at most 3 at once
    said = no_verdict(three, 4)
    assert said is not None and "never had its 4 streams in flight (at most 3, over 3 requests)" in said
    assert f"at least {HOLD_WAVES * 4} requests" in said
    assert no_verdict(three, 3) is None and no_verdict(three[:1], 1) is None  # reached: judged
    one_at_a_time = [_record(i, 2 * i, 2 * i + 1) for i in range(HOLD_WAVES * 4)]  # long enough, never two at once
    assert no_verdict(one_at_a_time, 4) is None  # judged: what kept the streams empty is the verdict's question


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 1000)), min_size=1, max_size=40))
def test_the_most_in_flight_is_what_a_sweep_of_every_instant_finds(spans: list[tuple[int, int]]) -> None:
    records = [_record(i, s, s + d) for i, (s, d) in enumerate(spans)]
    instants = {s for s, _ in spans} | {s + d for s, d in spans}
    brute = max(sum(s <= t < s + d for s, d in spans) for t in instants)
    assert max_in_flight(records) == brute


def test_a_concurrent_step_is_sized_to_hold_its_streams_unless_a_count_was_asked() -> None:
    chat = replace(load_scenario("code-chat"), concurrency=4)
    assert sized(Load(requests=3, per_stream=HOLD_WAVES), chat).requests == 16
    assert sized(Load(requests=40, per_stream=HOLD_WAVES), chat).requests == 40
    assert sized(Load(requests=3), chat).requests == 3  # asked: as asked (and judged on whether it held them)
    assert sized(Load(requests=3, per_stream=HOLD_WAVES, rate=2.0), chat).requests == 3  # an open loop: no streams


@given(st.floats(0.5, 0.995), st.integers(1, 64))
def test_an_slo_level_can_miss_two_requests_at_its_target_share(attainment: float, level: int) -> None:
    n = slo_requests(attainment, level)
    assert (n - 2) / n >= attainment - 1e-9  # two misses still meet the target: one slow request decides nothing
    assert n >= HOLD_WAVES * level
    assert slo_requests(0.9) == 20 and slo_requests(0.99) == 200


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_step_against_a_server_that_answers_nothing_says_so_instead_of_a_verdict(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    dead = Target("dead", f"http://127.0.0.1:{_closed_port()}/v1", "m")
    chat = replace(load_scenario("code-chat"), concurrency=2)
    result = run_bench(store, [dead], [chat], Load(requests=4, warmup=0, max_tokens=4), scrape_interval=0.1)
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, BenchRun)
    (step,) = stored.steps
    assert step.summary.ok == 0 and step.bottleneck is None
    assert step.no_verdict is not None and "succeeded" in step.no_verdict


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 2]], indirect=True)
def test_a_step_too_short_for_its_concurrency_is_not_judged_and_the_default_holds_it(
    sim: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client_never_the_limit(monkeypatch)
    store = RunStore(tmp_path / "runs.sqlite")
    chat = replace(load_scenario("code-chat"), concurrency=4)
    short = run_bench(store, [sim], [chat], Load(requests=3, warmup=0, max_tokens=8), scrape_interval=0.1)
    (step,) = short.stored.steps
    assert step.bottleneck is None and step.no_verdict is not None and "never had its 4 streams" in step.no_verdict
    held = run_bench(store, [sim], [chat], Load(requests=3, warmup=0, max_tokens=8, per_stream=HOLD_WAVES),
                     scrape_interval=0.1)  # fmt: skip
    (step,) = held.stored.steps
    assert step.summary.requests == 16 and max_in_flight(held.records) == 4
    assert step.no_verdict is None and step.bottleneck is not None


@pytest.mark.parametrize("sim", [["--max-running", 64, "--step-ms", 1]], indirect=True)
def test_the_slo_search_sends_each_level_what_its_target_needs(sim: Target, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    slo = SLO(ttft_ms=10_000.0, attainment=0.9)
    result, found = search_slo(store, [sim], load_scenario("code-chat"), Load(requests=2, warmup=0, max_tokens=4),
                               slo, limit=2)  # fmt: skip
    assert found["sim"].best == 2
    assert [s.summary.requests for s in result.stored.steps] == [slo_requests(0.9, 1), slo_requests(0.9, 2)]
