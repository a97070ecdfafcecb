import json
from pathlib import Path

import pytest

from servelab.bench.compare import side_by_side
from servelab.bench.metrics import Sample, derive, engine_values
from servelab.cli import main
from servelab.core.errors import UsageError
from servelab.core.records import RequestRecord
from servelab.load.scenarios import expand, load_scenario, read_prompts

EXPOSITION = """# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0"} %s
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0"} %s
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0"} %s
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 5.0
"""


def test_metrics_parser_keeps_engine_series_only() -> None:
    values = engine_values(EXPOSITION % (10, 4, 2))
    assert values["vllm:num_requests_running"] == 3.0
    assert not any(k.startswith("python_") for k in values)


def test_speculative_decoding_acceptance_and_the_zero_flag() -> None:
    good = derive(
        [Sample(0, engine_values(EXPOSITION % (100, 40, 20))), Sample(1, engine_values(EXPOSITION % (400, 160, 80)))]
    )
    assert good["spec_acceptance_rate"] == pytest.approx(120 / 300)
    assert good["spec_mean_accepted_length"] == pytest.approx(1 + 120 / 60)
    assert good["spec_warning"] is None and good["running_max"] == 3.0
    dead = derive(
        [Sample(0, engine_values(EXPOSITION % (100, 0, 20))), Sample(1, engine_values(EXPOSITION % (400, 0, 80)))]
    )
    assert dead["spec_acceptance_rate"] == 0 and "acceptance 0.00" in dead["spec_warning"]


def test_prompts_from_jsonl_and_sharegpt(tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    share = tmp_path / "s.json"
    share.write_text(
        json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}])
    )
    assert read_prompts(jsonl) == ["a", "b"] and read_prompts(share) == ["hi"]
    scenario = load_scenario(str(jsonl))
    assert scenario.messages(1, "")[-1]["content"] == "b"
    (tmp_path / "bad.jsonl").write_text("{nope\n")
    with pytest.raises(UsageError, match="neither JSONL"):
        read_prompts(tmp_path / "bad.jsonl")


def test_seed_000_expands_and_history_and_nonce_shape_the_chat() -> None:
    names = [s.name for s in expand(["seed-000"])]
    assert names == ["code-chat", "character-chat", "studio-enhance", "concurrent-4"]
    chat = load_scenario("character-chat").messages(0, "run1")
    assert chat[0]["content"].startswith("[run1] ") and len(chat) == 8
    assert load_scenario("concurrent-4").concurrency == 4
    with pytest.raises(UsageError, match="unknown scenario"):
        load_scenario("nope")


def _rec(target: str, first_ms: list[int]) -> list[RequestRecord]:
    out = []
    for i, ms in enumerate(first_ms):
        chunks = [ms * 10**6 + k * 10 * 10**6 for k in range(11)]
        out.append(
            RequestRecord(
                request_id=f"{target}{i}",
                endpoint="chat",
                scenario="s",
                target=target,
                sent_ns=0,
                first_token_ns=chunks[0],
                chunk_ns=chunks,
                end_ns=chunks[-1],
                completion_tokens=11,
            )
        )
    return out


def test_side_by_side_marks_a_difference_only_outside_the_noise() -> None:
    (row,) = side_by_side(_rec("a", [100, 101, 99, 100, 102]) + _rec("b", [300, 298, 301, 299, 300]))
    assert row.differs["ttft_ms"] and not row.differs["tok_s"]  # same decode speed, different TTFT
    (same,) = side_by_side(_rec("a", [100, 300, 200]) + _rec("b", [110, 290, 210]))
    assert not same.differs["ttft_ms"]


def test_bench_cli_rejects_a_bad_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--target", "nourl"]) == 2
    assert "NAME=URL" in capsys.readouterr().err


def test_prefix_is_fitted_with_the_targets_token_count() -> None:
    import asyncio

    from servelab.load.runner import fit_filler

    async def count(text: str) -> int:  # a tokenizer giving 2.1 tokens per word
        return int(len(text.split()) * 2.1)

    text, lines = asyncio.run(fit_filler(56000, "s", count))
    assert lines is not None and abs(asyncio.run(count(text)) - 56000) <= 280

    async def none(text: str) -> None:
        return None

    assert asyncio.run(fit_filler(1000, "s", none))[1] is None


def test_open_loop_stops_when_the_server_is_over_saturated(fixture_server: str) -> None:
    """The fixture's stall mode never finishes a stream: requests pile up until the cap stops the run."""
    import asyncio

    from servelab.load.arrivals import OpenLoop, arrivals_for
    from servelab.load.runner import Load, ScenarioRun, Share, Target
    from servelab.load.scenarios import load_scenario

    target = Target("fx", f"{fixture_server}/stall", "fixture")
    load = Load(requests=50, rate=200.0, arrival="constant", warmup=0, max_in_flight=5, fixed_output="off")

    async def go() -> None:
        run = ScenarioRun(target, load_scenario("code-chat"), load, lambda r: None)
        arrivals = arrivals_for(load, run.scenario)
        assert isinstance(arrivals, OpenLoop)
        task = asyncio.create_task(run._open_loop(arrivals, Share()))
        await asyncio.sleep(0.5)
        assert run.result.stopped_early and "over-saturated" in run.result.stopped_early
        task.cancel()

    asyncio.run(go())


def test_byte_identical_requests_when_asked(fixture_server: str) -> None:
    """With --no-unique-prefix a file prompt goes out as the bare user message, as other tools send it."""
    import asyncio

    from servelab.load.datasets import Prompt
    from servelab.load.runner import Load, ScenarioRun, Target, payload
    from servelab.load.scenarios import Scenario

    scenario = Scenario(name="f", prompts=(Prompt((("user", "hello there"),)),))
    plain = ScenarioRun(Target("fx", fixture_server, "m"), scenario, Load(unique_prefix=False), lambda r: None)
    assert plain.scenario.messages(0, plain._unique(0)) == [{"role": "user", "content": "hello there"}]
    unique = ScenarioRun(Target("fx", fixture_server, "m"), scenario, Load(), lambda r: None)
    first = unique.scenario.messages(0, unique._unique(0))
    assert first[0]["role"] == "system" and first[-1]["content"] == "hello there"
    body = payload(plain.target, scenario, first, Load())
    assert body["ignore_eos"] is True and "min_tokens" not in body  # as vllm bench serve sends it
    assert payload(plain.target, scenario, first, Load(fixed_output="min_tokens"))["min_tokens"] == 128
    assert "ignore_eos" not in payload(plain.target, scenario, first, Load(fixed_output="off"))
    assert body["temperature"] == 0.0  # greedy unless asked
    assert payload(plain.target, scenario, first, Load(temperature=1.0))["temperature"] == 1.0
    run = ScenarioRun(
        Target("fx", f"{fixture_server}/schedule", "m"),
        scenario,
        Load(requests=1, warmup=0, unique_prefix=False, max_tokens=2),
        lambda r: None,
    )
    result = asyncio.run(run.run())
    assert any("not made unique" in w for w in result.warnings)


def test_a_load_without_a_count_runs_until_cancelled(fixture_server: str) -> None:
    """requests=None (coexist's background LLM load): the closed loop keeps sending until it is cancelled, and what
    finished is recorded."""
    import asyncio
    import contextlib
    from dataclasses import replace

    from servelab.load.runner import Load, ScenarioRun, Target
    from servelab.load.scenarios import load_scenario

    target = Target("fx", f"{fixture_server}/schedule", "fixture")
    load = Load(requests=None, concurrency=2, warmup=0, max_tokens=2, fixed_output="off")
    seen: list[str] = []

    async def go() -> None:
        run = ScenarioRun(
            target, replace(load_scenario("code-chat"), max_tokens=2), load, lambda r: seen.append(r.scenario)
        )
        task = asyncio.create_task(run.run())
        await asyncio.sleep(1.5)
        assert not task.done()  # no count: it does not stop on its own
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert len(seen) >= 10 and set(seen) == {"code-chat"}  # ~60 ms a request, two streams, 1.5 s


def test_a_closed_loop_makes_no_more_streams_than_it_has_requests() -> None:
    """--concurrency 10^20 with --requests 2 made a stream per unit of concurrency (12 GB, then killed)."""
    from servelab.load.runner import stream_count

    assert stream_count(10**20, 2) == 2
    assert stream_count(64, 1000) == 64
    assert stream_count(64, None) == 64  # a run bounded by its duration keeps every stream


def test_load_processes_are_no_more_than_the_step_can_use() -> None:
    """--workers 10^20 tried to split the streams 10^20 ways; a process without a stream or a request idles."""
    from servelab.load.arrivals import ClosedLoop, OpenLoop
    from servelab.load.workers import usable_cores, useful_workers

    assert useful_workers(8, ClosedLoop(concurrency=3), 100) == min(3, 4 * usable_cores())
    assert useful_workers(8, OpenLoop(rate=50.0), 2) == 2
    assert useful_workers(10**20, OpenLoop(rate=50.0), None) == 4 * usable_cores()
    assert useful_workers(2, ClosedLoop(concurrency=64), None) == min(2, 4 * usable_cores())
