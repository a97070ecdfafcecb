"""Every outcome class on canned replies, for every kind of item."""

from __future__ import annotations

import pytest

from servelab.core.records import ErrorClass, Labels, RequestRecord
from servelab.eval.grade import Outcome, extract_code, grade_integer, grade_json, grade_tool, grade_word
from servelab.eval.items import Item
from servelab.eval.runner import EvalOptions, grade_record

C, F, W = Outcome.CORRECT, Outcome.FORMAT_VIOLATION, Outcome.WRONG


def reply(text: str = "", *, finish: str = "stop", error: ErrorClass | None = None, tools: list | None = None):
    return RequestRecord(
        request_id="r",
        endpoint="chat",
        output_text=text,
        finish_reason=finish if error is None else None,
        error=error,
        error_detail="boom" if error else None,
        tool_calls=tools or [],
    )


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ("42", C),
        ("  42\n", C),
        ("42\n\nExplanation: 6 times 7.", F),  # the seed's case: right, then words after "just the integer"
        ("The answer is **42**.", F),
        ("6 * 7 = 42", F),
        ("41", W),
        ("forty-two", W),
        ("42.5", W),
        ("", W),
    ],
)
def test_integer(text: str, outcome: Outcome) -> None:
    assert grade_integer(text, 42).outcome is outcome


@pytest.mark.parametrize(
    ("text", "outcome"),
    [("Paris", C), ("paris", C), ("Paris.", F), ("The capital is Paris", F), ("Lyon", W), ("I think it is Lyon", W)],
)
def test_word(text: str, outcome: Outcome) -> None:
    assert grade_word(text, "Paris").outcome is outcome


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ('{"sum": 42, "product": 425}', C),
        ('{"product": 425, "sum": 42}', C),
        ('```json\n{"sum": 42, "product": 425}\n```', F),
        ('Here you go: {"sum": 42, "product": 425}', F),
        ('{"sum": "42", "product": 425}', W),
        ('{"sum": 42}', W),
        ("not json", W),
    ],
)
def test_json(text: str, outcome: Outcome) -> None:
    assert grade_json(text, {"sum": 42, "product": 425}).outcome is outcome


def call(name: str, arguments: str) -> dict:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}


WANT = {"name": "add", "arguments": {"a": 17, "b": 25}}


@pytest.mark.parametrize(
    ("calls", "content", "outcome"),
    [
        ([call("add", '{"a": 17, "b": 25}')], "", C),
        ([call("add", '{"b": 25, "a": 17}')], "", C),
        ([call("add", '{"a": "17", "b": "25"}')], "", F),  # right values, wrong JSON types
        ([call("add", '{"a": 17, "b": 25}'), call("add", '{"a": 1, "b": 2}')], "", F),  # an extra call
        ([], '{"name": "add", "arguments": {"a": 17, "b": 25}}', F),  # written as text, not a tool call
        ([call("add", '{"a": 17, "b": 26}')], "", W),
        ([call("get_weather", '{"city": "Paris"}')], "", W),
        ([call("add", "{a: 17")], "", W),  # invalid JSON arguments
        ([], "42", W),
    ],
)
def test_tool_calls(calls: list, content: str, outcome: Outcome) -> None:
    assert grade_tool(calls, content, WANT).outcome is outcome


def test_irrelevance_wants_no_call() -> None:
    assert grade_tool([], "Why did the cat sit on the laptop? To keep an eye on the mouse.", None).outcome is C
    assert grade_tool([call("add", '{"a": 1, "b": 2}')], "", None).outcome is W


INTEGER = Item(id="add", suite="quick", kind="integer", prompt="?", answer=42)


@pytest.mark.parametrize(
    ("record", "outcome"),
    [
        (reply("42"), Outcome.CORRECT),
        (reply("42 because"), Outcome.FORMAT_VIOLATION),
        (reply("7"), Outcome.WRONG),
        (reply("", error=ErrorClass.HTTP_5XX), Outcome.ERROR),
        (reply("4", error=ErrorClass.DISCONNECT), Outcome.ERROR),
        (reply("", error=ErrorClass.TIMEOUT), Outcome.TIMEOUT),
        (reply("42", finish="length"), Outcome.TIMEOUT),  # cut at max_tokens counts as timeout
    ],
)
def test_every_outcome_class_from_a_record(record: RequestRecord, outcome: Outcome) -> None:
    grade = grade_record(INTEGER, record, EvalOptions())
    assert grade.outcome is outcome
    assert grade.strict == (outcome is Outcome.CORRECT)
    assert grade.semantic == (outcome in (Outcome.CORRECT, Outcome.FORMAT_VIOLATION))


def test_needle_and_tool_items_through_the_record() -> None:
    needle = Item(id="n", suite="needle", kind="needle", prompt="?", answer="K7Q-2F9X")
    assert grade_record(needle, reply("K7Q-2F9X"), EvalOptions()).outcome is C
    assert grade_record(needle, reply("The id is K7Q-2F9X."), EvalOptions()).outcome is F
    assert grade_record(needle, reply("K7Q-2F9Y"), EvalOptions()).outcome is W
    tool = Item(id="t", suite="tools", kind="tool", prompt="?", answer=WANT)
    assert grade_record(tool, reply(tools=[call("add", '{"a": 17, "b": 25}')]), EvalOptions()).outcome is C


def test_extract_code_tells_bare_code_from_code_in_prose() -> None:
    assert extract_code("```python\ndef f():\n    return 1\n```") == ("def f():\n    return 1\n", True)
    assert extract_code("def f():\n    return 1") == ("def f():\n    return 1", True)
    assert extract_code("Sure!\n```python\nx = 1\n```\nHope it helps.") == ("x = 1\n", False)


def test_multi_turn_item_needs_the_right_call_and_the_right_final_answer() -> None:
    from servelab.eval.backends import call as backend_call
    from servelab.eval.items import load_suite
    from servelab.eval.runner import grade_all

    item = next(i for i in load_suite("tools") if i.meta.get("backend"))
    assert "rain" in backend_call("weather", "get_weather", '{"city": "Oslo", "unit": "celsius"}')
    assert "error" in backend_call("weather", "get_weather", '{"town": "Oslo"}')
    first = reply(tools=[call("get_weather", '{"city": "Oslo", "unit": "celsius"}')], finish="tool_calls")
    first.scenario = "tools/umbrella-multi-turn#0"
    first.labels = Labels(step=first.scenario, suite="tools", item="umbrella-multi-turn", repeat=0, turn=1)

    def final(text: str) -> RequestRecord:
        record = reply(text)
        record.scenario = "tools/umbrella-multi-turn#0+2"
        record.labels = Labels(step=record.scenario, suite="tools", item="umbrella-multi-turn", repeat=0, turn=2)
        return record

    def outcome(*records: RequestRecord) -> Outcome:
        (graded,) = grade_all([item], list(records), EvalOptions())
        assert graded.record is first or graded.record.scenario.endswith("#0")
        return graded.grade.outcome

    assert outcome(first, final("Yes")) is C
    assert outcome(first, final("It is raining in Oslo, so yes")) is F
    assert outcome(first, final("No")) is W
    assert outcome(first) is W  # no answer after the tool result
    wrong_city = reply(tools=[call("get_weather", '{"city": "Madrid", "unit": "celsius"}')], finish="tool_calls")
    wrong_city.scenario = "tools/umbrella-multi-turn#0"
    wrong_city.labels = first.labels
    assert outcome(wrong_city, final("Yes")) is W


def test_code_suites_refuse_to_run_without_a_sandbox_unless_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    from servelab.core.errors import UsageError
    from servelab.eval import sandbox

    monkeypatch.setattr(sandbox, "bwrap_works", lambda: False)
    with pytest.raises(UsageError, match="no working sandbox") as refused:
        sandbox.sandbox_kind()
    assert "--unsafe" in (refused.value.hint or "")
    assert sandbox.sandbox_kind(unsafe=True) == "none"
