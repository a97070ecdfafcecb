"""servelab eval against the real embedded engine (SmolLM2-135M: it scores low, and that is the result)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servelab.bench import resolve_targets
from servelab.cli import main
from servelab.core.results import EvalRun, load_result
from servelab.core.store import RunStore
from servelab.engines.embedded import EngineState
from servelab.eval import EvalOptions, load_items, regrade, run_eval
from servelab.eval.grade import Outcome
from servelab.eval.needle import needle_item


def test_quick_suite_every_item_one_outcome_stored_raw_and_regraded(engine: EngineState, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    targets = resolve_targets([("embedded", engine.url)])
    items = [*load_items(["quick"]), needle_item(1500, 0.5)]
    result = run_eval(store, targets, items, EvalOptions(repeats=2, concurrency=4))
    replies = result.replies["embedded"]
    assert len(replies) == 2 * len(items)
    assert sorted((g.item.id, g.repeat) for g in replies) == sorted((i.id, r) for i in items for r in range(2))
    assert all(isinstance(g.grade.outcome, Outcome) for g in replies)
    assert not [g for g in replies if g.grade.outcome is Outcome.ERROR], [g.grade.detail for g in replies]
    records = store.records(result.run_id)
    assert len(records) == 2 * len(items) and all(r.output_text or r.finish_reason for r in records)
    needle = [g for g in replies if g.item.kind == "needle"]
    assert all(g.record.prompt_tokens and abs(g.record.prompt_tokens - 1500) < 0.05 * 1500 for g in needle)
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, EvalRun) and stored.status == "complete"
    totals = stored.targets["embedded"].all
    assert totals.n == 2 * len(items) and sum(totals.outcomes.values()) == totals.n
    repeats = stored.targets["embedded"].repeats
    assert repeats is not None and repeats.k == 2
    assert sorted((r.item, r.repeat, r.outcome) for r in stored.replies) == sorted(
        (g.item.id, g.repeat, g.grade.outcome.value) for g in replies
    )
    assert all(r.labels.suite and r.labels.item and r.labels.repeat in (0, 1) for r in records)
    again = regrade(store, result.run_id, EvalOptions(repeats=2))
    first = sorted((g.item.id, g.repeat, g.grade.outcome) for g in replies)
    assert sorted((g.item.id, g.repeat, g.grade.outcome) for g in again.replies["embedded"]) == first


def test_eval_command_prints_the_table_and_json(
    engine: EngineState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    assert main(["eval", "--target", f"small={engine.url}", "--suite", "quick", "--store", store]) == 0
    text = capsys.readouterr().out
    assert "eval " in text and "Wilson" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("small: "))
    correct = re.search(r"(\d+)/(\d+) correct", line)
    others = [int(n) for n in re.findall(r"(\d+) (?:format violations|wrong|errors|timeouts)", line)]
    assert correct is not None and int(correct.group(2)) == 6
    assert int(correct.group(1)) + sum(others) == 6  # every item has exactly one of the five outcomes
    assert main(["eval", "--regrade", "latest", "--store", store, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["targets"]["small"]["all"]["n"] == 6


def test_tools_suite_reaches_the_engine_and_a_forced_call_is_graded(engine: EngineState, tmp_path: Path) -> None:
    """The engine accepts tools (hermes parser); a tool_choice that forces the call yields native tool_calls."""
    from dataclasses import replace

    store = RunStore(tmp_path / "runs.sqlite")
    targets = resolve_targets([("embedded", engine.url)])
    items = load_items(["tools"])
    forced = [replace(i, id=i.id + "-forced", max_tokens=48) for i in items if i.answer is not None]
    result = run_eval(store, targets, items, EvalOptions())
    assert not [g for g in result.replies["embedded"] if g.grade.outcome is Outcome.ERROR]
    options = EvalOptions(tool_choice="required")
    forced_result = run_eval(store, targets, forced, options)
    for g in forced_result.replies["embedded"]:
        assert g.record.tool_calls, g.record.output_text  # a native call came back, whatever its arguments
        assert g.grade.outcome in (Outcome.CORRECT, Outcome.FORMAT_VIOLATION, Outcome.WRONG, Outcome.TIMEOUT)
