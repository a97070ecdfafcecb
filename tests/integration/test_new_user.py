"""A new user's path against real servers: the embedded engine's 8,192-token context (a workload that cannot fit is
fitted or refused before it is sent; a request the server refuses fails its step, with the server's own words,
in the table, the result and the exit code), and a second embedded engine started with --api-key (no key, a wrong
key, the key by flag or by OPENAI_API_KEY with OPENAI_BASE_URL, a model it does not serve)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.coexist import CoexistOptions, LlmLoad, WorkerProbe, WorkerSpec, run_coexist
from servelab.core.results import BenchRun, EvalRun, load_result
from servelab.core.store import RunStore
from servelab.core.urls import api_base
from servelab.engines.embedded import EngineState
from servelab.eval import EvalOptions, load_items, run_eval
from servelab.load import TargetSpec, resolve, token_counter
from tests.integration.conftest import EXTERNAL_KEY

pytestmark = pytest.mark.integration


def test_the_target_says_its_model_and_context(engine: EngineState) -> None:
    target = resolve(TargetSpec("embedded", engine.url))
    assert target.model == engine.model and target.max_model_len == 8192


def test_a_prefix_longer_than_the_context_is_refused_before_anything_is_sent(
    engine: EngineState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.sqlite"
    argv = ["bench", "--target", f"e={engine.url}", "--scenario", "prefix-long", "--store", str(store)]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "too long for the target's context (e 8,192 tokens)" in err and "prefix-long on e (56,000" in err
    assert not store.exists() or RunStore(store).list_runs() == []


def test_a_request_the_server_refuses_fails_its_step_with_the_servers_words(
    engine: EngineState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prompt file's line is only measured by the server: one far over 8,192 tokens gets vLLM's real 400."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "word " * 12000}) + "\n" + json.dumps({"prompt": "Say hi."}) + "\n")
    store = tmp_path / "runs.sqlite"
    argv = ["bench", "--target", f"e={engine.url}", "--scenario", str(prompts), "--requests", "2", "--max-tokens",
            "4", "--warmup", "0", "--store", str(store)]  # fmt: skip
    assert main(argv) == 1
    captured = capsys.readouterr()
    out, err = " ".join(captured.out.split()), " ".join(captured.err.split())
    assert "FAILED" in out and "context too long" in out
    assert "requests failed" in err and "1 of 2 failed: context too long (1)" in err
    with RunStore(store) as db:
        (info,) = db.list_runs()
        result = load_result(db, info)
    assert isinstance(result, BenchRun) and info.status == "complete"
    (step,) = result.steps
    assert step.summary.failures == {"context too long": 1} and step.summary.ok == 1
    assert "maximum context length" in step.summary.failure_messages["context too long"].lower() or (
        "8192" in step.summary.failure_messages["context too long"]
    )


def test_a_needle_longer_than_the_context_is_not_asked(engine: EngineState, tmp_path: Path) -> None:
    target = resolve(TargetSpec("embedded", engine.url))
    items = load_items(["needle"], needle_lengths=[1000, 36000])
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_eval(db, [target], items, EvalOptions(concurrency=4))
        records = db.records(result.run_id)
    stored = result.stored
    assert isinstance(stored, EvalRun) and len(stored.skipped) == 3  # three depths of the 36,000-token needle
    assert all("longer than embedded's context" in s for s in stored.skipped)
    assert len(records) == 3 and all(r.ok for r in records)  # only the 1,000-token needles were sent
    assert stored.targets["embedded"].all.n == 3 and not stored.request_failures()


def test_coexist_fits_its_prefill_to_the_context(engine: EngineState, tmp_path: Path) -> None:
    target = resolve(TargetSpec("embedded", engine.url))
    probe = WorkerProbe(WorkerSpec("cpu", "voice", dim=128, layers=2, ffn=256, chunks=10, period_ms=1500))
    options = CoexistOptions(conditions=("alone", "prefill"), repeats=1, utterances=2, settle_s=2.0,
                             load=LlmLoad(prefill_tokens=32000))  # fmt: skip
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_coexist(db, probe, target, options)
        records = db.records(result.run_id)
    assert any("the prefill prompts are 8,120 tokens, not 32,000" in w for w in result.warnings), result.warnings
    prefill = [r for r in records if r.labels.condition == "prefill"]
    assert prefill and all(r.ok or r.error == "cancelled" for r in prefill)
    assert not result.stored().request_failures()


def test_a_server_with_a_key(external_engine: EngineState, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    store = str(tmp_path / "runs.sqlite")
    bench = ["bench", "--scenario", "code-chat", "--requests", "1", "--max-tokens", "4", "--warmup", "0",
             "--store", store]  # fmt: skip
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main([*bench, "--target", f"k={external_engine.url}"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "refused a request without an API key (HTTP 401" in err and "--api-key" in err and "http" not in err.split(
        "hint:")[1]  # fmt: skip
    assert main([*bench, "--target", f"k={external_engine.url}", "--api-key", "k=wrong"]) == 1
    assert "refused the API key (HTTP 401" in " ".join(capsys.readouterr().err.split())
    assert main([*bench, "--target", f"k={external_engine.url}", "--api-key", f"k={EXTERNAL_KEY}"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at spaces
    assert f"target k: {external_engine.model} at {external_engine.url} (context 8,192 tokens), with an API key" in out
    monkeypatch.setenv("OPENAI_BASE_URL", f"{external_engine.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", EXTERNAL_KEY)
    assert main(bench) == 0  # no --target: the variables
    assert "target openai:" in capsys.readouterr().out
    assert main([*bench, "--model", "no-such-model"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "does not serve 'no-such-model'" in err and external_engine.model in err


def test_your_traffic_and_synthetic_lengths_on_the_engine(engine: EngineState, tmp_path: Path) -> None:
    """ShareGPT's recorded reply sets the output length (counted by the engine's /tokenize), a line's max_tokens
    its own; synthetic:IN:OUT sends IN prompt tokens by the engine's count and gets OUT back."""
    from servelab.bench import Load, run_bench
    from servelab.load import expand

    reply = "The lighthouse keeper climbed the stairs again, counting each step as the storm rose."
    data = _jsonl(tmp_path / "mine.jsonl", [
        {"conversations": [{"from": "human", "value": "Tell me a story."}, {"from": "gpt", "value": reply}]},
        {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 5},
    ])  # fmt: skip
    target = resolve(TargetSpec("embedded", engine.url))
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_bench(db, [target], expand([str(data), "synthetic:300:12"]), Load(requests=2, warmup=0))
    mine = [r for r in result.records if r.scenario == "mine"]
    synthetic = [r for r in result.records if r.scenario == "synthetic:300:12"]
    assert all(r.ok for r in result.records), [r.error_detail for r in result.records]
    counted = asyncio.run(token_counter(api_base(engine.url), engine.model)(reply))
    assert counted and sorted(r.completion_tokens or 0 for r in mine) == sorted([counted, 5])
    assert all(r.completion_tokens == 12 for r in synthetic)
    assert all(290 <= (r.prompt_tokens or 0) <= 345 for r in synthetic), [r.prompt_tokens for r in synthetic]


def _jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path
