"""Recorded agent traces become one item per assistant turn, graded against the recorded next turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.core.errors import UsageError
from servelab.core.records import RequestRecord
from servelab.eval.grade import Outcome
from servelab.eval.replay import agreement, load_traces
from servelab.eval.runner import EvalOptions, grade_record

CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
TRACE = {
    "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
    "messages": [
        {"role": "system", "content": "You fix code."},
        {"role": "user", "content": "Look at a.py"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1"},
        {"role": "assistant", "content": "a.py sets x to 1."},
    ],
}


def test_each_assistant_turn_is_an_item_with_the_conversation_before_it(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(TRACE) + "\n" + json.dumps(TRACE["messages"]) + "\n")
    items = load_traces(path)
    assert [i.id for i in items] == ["trace1-turn2", "trace1-turn4", "trace2-turn2", "trace2-turn4"]
    first, second = items[0], items[1]
    assert first.messages() == TRACE["messages"][:2] and first.tools == TRACE["tools"]
    assert first.answer == {"name": "read_file", "arguments": {"path": "a.py"}}
    assert second.answer is None and len(second.messages()) == 4 and items[2].tools == []


def test_next_turn_graded_and_agreement_counted() -> None:
    items = load_traces_from(TRACE)
    same = RequestRecord(request_id="r", endpoint="chat", finish_reason="tool_calls", tool_calls=[CALL])
    other = dict(CALL, function={"name": "read_file", "arguments": '{"path": "b.py"}'})
    differs = RequestRecord(request_id="r", endpoint="chat", finish_reason="tool_calls", tool_calls=[other])
    text = RequestRecord(request_id="r", endpoint="chat", finish_reason="stop", output_text="x is 1")
    assert grade_record(items[0], same, EvalOptions()).outcome is Outcome.CORRECT
    assert grade_record(items[0], differs, EvalOptions()).outcome is Outcome.WRONG
    assert agreement(differs.tool_calls, items[0].answer) == {"tool_choice": True, "arguments": False}
    assert grade_record(items[1], text, EvalOptions()).outcome is Outcome.CORRECT  # text where text was recorded
    assert agreement(same.tool_calls, items[1].answer) == {"tool_choice": False, "arguments": False}


def load_traces_from(trace: dict, tmp: Path | None = None):  # type: ignore[no-untyped-def]
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.json"
        path.write_text(json.dumps([trace]))
        return load_traces(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [("{nope", "not JSON"), ('{"messages": 3}', "not a list of messages"), ('[{"role": "user"}]', "no assistant")],
)
def test_bad_trace_files_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        load_traces(path)
