"""No silent default in the spec files: scenarios, the user's dataset lines, replay traces, a repo task's task.json
and the eval suites refuse a key they do not know (near misses, for data that carries its own metadata), and a
scenario argument that is not one says what it is instead (a missing file, a folder, a misspelled name)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.core.errors import UsageError
from servelab.eval.items import builtin_suites, load_suite
from servelab.eval.repair.task import load_task
from servelab.eval.replay import load_traces
from servelab.load.datasets import parse_synthetic, read_dataset
from servelab.load.scenarios import _from_dict, load_scenario, scenario_names

BASE = {"code-chat": {"system": "s", "user": "u", "max_tokens": 8}}


def test_a_scenario_with_a_misspelled_key_is_refused() -> None:
    with pytest.raises(UsageError, match=re.escape("scenario 'x': unknown key 'max_token'; did you mean 'max_tokens'")):
        _from_dict("x", {"user": "u", "max_token": 5}, BASE)


def test_a_based_scenario_takes_only_what_it_may_override() -> None:
    """'user' on a scenario with a base was dropped without a word; now it is refused, and what it may set is kept."""
    with pytest.raises(UsageError, match="unknown key 'user'"):
        _from_dict("x", {"base": "code-chat", "user": "other"}, BASE)
    with pytest.raises(UsageError, match="no scenario 'nope'"):
        _from_dict("x", {"base": "nope"}, BASE)
    based = _from_dict("x", {"base": "code-chat", "concurrency": 4, "description": "d"}, BASE)
    assert (based.name, based.concurrency, based.user, based.description) == ("x", 4, "u", "d")


def test_a_scenario_cache_mode_is_one_it_knows() -> None:
    with pytest.raises(UsageError, match="cache is one of cold, cold-then-warm"):
        _from_dict("x", {"user": "u", "cache": "warm"}, BASE)


def test_every_built_in_scenario_loads() -> None:
    assert all(load_scenario(name).name == name for name in scenario_names())


def test_a_missing_file_is_not_found_not_an_unknown_scenario(tmp_path: Path) -> None:
    for spec in (str(tmp_path / "mine.jsonl"), "traffic.jsonl", "data/traffic"):
        with pytest.raises(UsageError, match="file not found: "):
            load_scenario(spec)
    with pytest.raises(UsageError, match="is a folder, not a file of prompts"):
        load_scenario(str(tmp_path))


def test_a_misspelled_scenario_name_gets_the_built_in_one() -> None:
    with pytest.raises(UsageError, match=re.escape("unknown scenario 'code-caht'; did you mean 'code-chat'?")):
        load_scenario("code-caht")


def _jsonl(tmp_path: Path, *records: dict[str, Any]) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_dataset_line_with_a_misspelled_key_is_named_by_its_line(tmp_path: Path) -> None:
    """max_token would have been dropped and the run's output length silently the default."""
    path = _jsonl(tmp_path, {"prompt": "a", "max_tokens": 3}, {"prompt": "b", "max_token": 5})
    with pytest.raises(UsageError, match=re.escape(":line 2: unknown key 'max_token'; did you mean 'max_tokens'?")):
        read_dataset(path)
    assert [p.user for p in read_dataset(path, "skip").prompts] == ["a"]


@pytest.mark.parametrize(("typo", "meant"), [("promt", "prompt"), ("mesages", "messages"),
                                             ("conversation", "conversations")])  # fmt: skip
def test_a_dataset_line_s_misspelled_prompt_key_gets_the_right_one(tmp_path: Path, typo: str, meant: str) -> None:
    path = _jsonl(tmp_path, {"prompt": "fine"}, {typo: "x"})
    with pytest.raises(UsageError, match=re.escape(f"did you mean {meant!r}?")):
        read_dataset(path)


def test_a_dataset_s_own_metadata_is_left_alone(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, {"id": "r-1", "source": "logs", "output": "ref", "prompt": "a", "max_new_tokens": 7})
    (prompt,) = read_dataset(path).prompts
    assert (prompt.user, prompt.max_tokens) == ("a", 7)  # max_new_tokens is an output length, honoured


BAD_SYNTHETIC = ("synthetic:100-:8", "synthetic:-100:8", "synthetic:100:8-", "synthetic:1-2-3:8", "synthetic: 100:8",
                 "synthetic:+5:8", "synthetic:100:", "synthetic:1e3:8")  # fmt: skip


@pytest.mark.parametrize("spec", BAD_SYNTHETIC)
def test_a_synthetic_spec_with_a_missing_end_is_refused(spec: str) -> None:
    """'100-' was read as 100: a range with one end is refused, never taken as a count."""
    with pytest.raises(UsageError, match="synthetic"):
        load_scenario(spec)


@given(st.text(alphabet="0123456789-", max_size=8), st.text(alphabet="0123456789-", max_size=8))
def test_a_synthetic_spec_is_read_exactly_or_refused(inp: str, out: str) -> None:
    """Whatever the text: the span read is exactly what was written (a count, or both ends of a range)."""
    expected: list[tuple[int, int] | None] = []
    for text in (inp, out):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
        span = (int(match[1]), int(match[2] or match[1])) if match else None
        expected.append(span if span and 1 <= span[0] <= span[1] else None)
    if None in expected:
        with pytest.raises(UsageError):
            parse_synthetic(f"synthetic:{inp}:{out}")
    else:
        synthetic = parse_synthetic(f"synthetic:{inp}:{out}")
        assert [synthetic.input_tokens, synthetic.output_tokens] == expected


def test_a_trace_with_a_misspelled_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    path.write_text(json.dumps({"messages": messages, "tool": [], "model": "m"}) + "\n")
    with pytest.raises(UsageError, match=re.escape("trace 1: unknown key 'tool'; did you mean 'tools'?")):
        load_traces(path)
    path.write_text(json.dumps({"messages": messages, "model": "m", "id": 3}) + "\n")
    assert len(load_traces(path)) == 1  # a trace's own keys are its own


def test_a_repo_task_with_a_misspelled_key_is_refused(tmp_path: Path) -> None:
    raw = {"name": "t", "instructions": "fix it", "broken_fail": ["tests/test_a.py::test_a"]}
    (tmp_path / "task.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError, match=re.escape("unknown key 'broken_fail'; did you mean 'broken_fails'?")):
        load_task(str(tmp_path) + "/")
    raw = {"name": "t", "instructions": "fix it", "harvest": {"max_filez": 3}}
    (tmp_path / "task.json").write_text(json.dumps(raw))
    (tmp_path / "repo").mkdir()
    with pytest.raises(
        UsageError, match=re.escape("unknown key 'harvest.max_filez'; did you mean 'harvest.max_files'?")
    ):
        load_task(str(tmp_path) + "/")


def test_every_built_in_suite_loads_with_only_known_keys() -> None:
    assert all(load_suite(name) for name in builtin_suites())
