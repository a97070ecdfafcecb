"""The agent loop's tools, limits and trajectory, driven by scripted turns in place of a model (the loop's
contract with a model is a list of tool calls per turn; the engine on CI has no tool-call parser), then graded
with the hidden tests like any attempt. Needs bubblewrap."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servelab.core.records import ErrorClass, Labels, RequestRecord
from servelab.core.results import RepoRun, load_result
from servelab.core.store import RunStore
from servelab.eval.grade import Outcome
from servelab.eval.repair import AgentLimits, Policy, load_task, run_repo
from servelab.load.runner import Target
from tests.unit.eval.needs_bwrap import require_bwrap

require_bwrap()

TASK = load_task("inventory")
FIX = (TASK.root / "reference" / "inventory" / "core.py").read_text()


def turn(*calls: tuple[str, dict[str, Any]], error: ErrorClass | None = None) -> RequestRecord:
    record = RequestRecord(request_id="r", endpoint="chat", error=error, error_detail="HTTP 400" if error else None)
    record.tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)
    ]
    return record


def scripted(turns: list[RequestRecord], seen: list[list[dict[str, Any]]]) -> Callable[..., Policy]:
    def factory(target: Target, sink: Callable[[RequestRecord], None], labels: Labels) -> Policy:
        script = iter(turns)

        async def policy(messages: list[dict[str, Any]]) -> RequestRecord:
            seen.append([dict(m) for m in messages])
            record = next(script, turn())
            sink(record)
            return record

        return policy

    return factory


TARGET = Target("scripted", "http://127.0.0.1:9", "none")


def test_a_fixing_agent_resolves_the_task_with_hidden_tests(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []
    turns = [
        turn(("shell", {"command": "python3 -m pytest -q 2>&1 | tail -3; id -u; ls /root 2>&1 | head -1"})),
        turn(("shell", {"command": f"ls -A {TASK.root.parent}; find / -name test_hidden.py 2>/dev/null | wc -l"})),
        turn(("read_file", {"path": "inventory/core.py"})),
        turn(("write_file", {"path": "inventory/core.py", "content": FIX})),
        turn(("shell", {"command": "python3 -m pytest -q 2>&1 | tail -1"})),
        turn(("finish", {"summary": "fixed"})),
    ]
    store = RunStore(tmp_path / "runs.sqlite")
    result = run_repo(store, [TARGET], TASK, "bwrap", policy=scripted(turns, seen))
    attempt = result.attempts[0]
    assert attempt.trajectory.stopped == "finish" and attempt.trajectory.steps == 6
    assert attempt.outcome is Outcome.CORRECT
    tool_outputs = [m["content"] for m in attempt.trajectory.messages if m["role"] == "tool"]
    assert "1 failed, 5 passed" in tool_outputs[0]  # the agent sees only the visible tests
    assert "65534" in tool_outputs[0] and "cannot access '/root'" in tool_outputs[0]  # not even there
    assert tool_outputs[1].startswith("exit code 0\n0\n")  # no copy of the hidden tests is visible anywhere
    assert "def normalize" in tool_outputs[2]
    assert "6 passed" in tool_outputs[4]
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, RepoRun) and stored.status == "complete" and result.stored is not None
    assert stored.targets == result.stored.targets and stored.task == TASK.name
    assert stored.targets["scripted"].traps == dict.fromkeys(sorted(set(TASK.traps.values())), 1)
    summary = store.summaries(result.run_id)
    assert summary["repo/scripted/0"]["trajectory"]["messages"][-1]["role"] == "tool"


def test_visible_only_fix_shows_the_gap_and_the_trap_matrix(tmp_path: Path) -> None:
    broken = (TASK.repo / "inventory" / "core.py").read_text()
    visible_fix = broken.replace("return sku.strip()", "return sku.strip().upper()")
    turns = [turn(("write_file", {"path": "inventory/core.py", "content": visible_fix})), turn(("finish", {}))]
    result = run_repo(RunStore(tmp_path / "s.sqlite"), [TARGET], TASK, "bwrap", policy=scripted(turns, []))
    assert result.stored is not None
    row = result.stored.targets["scripted"]
    assert result.attempts[0].outcome is Outcome.WRONG
    assert row.visible_pass_rate == 1.0 and row.hidden_pass_rate == pytest.approx(1 / 7)
    assert row.gap == pytest.approx(6 / 7)
    assert row.traps["sku-normalization"] == 1 and row.traps["round-half-up"] == 0


def test_limits_escape_attempts_and_model_errors(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.sqlite")
    loop = [turn(("write_file", {"path": "../outside.txt", "content": "x"}))] * 3
    result = run_repo(store, [TARGET], TASK, "bwrap", limits=AgentLimits(max_steps=3), policy=scripted(loop, []))
    attempt = result.attempts[0]
    assert attempt.trajectory.stopped == "max_steps" and attempt.outcome is Outcome.WRONG
    assert all("outside the repository" in m["content"] for m in attempt.trajectory.messages if m["role"] == "tool")
    assert not (TASK.repo.parent / "outside.txt").exists()
    failing = run_repo(store, [TARGET], TASK, "bwrap", policy=scripted([turn(error=ErrorClass.HTTP_4XX)], []))
    assert failing.attempts[0].trajectory.stopped == "error" and failing.attempts[0].outcome is Outcome.ERROR
