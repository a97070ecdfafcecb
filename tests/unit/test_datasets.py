"""Your own traffic as a workload: prompts, OpenAI messages and ShareGPT records with the output lengths the data
gives, a bad line named by its number and skipped or stopped at, and synthetic N-in / M-out workloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.core.errors import UsageError
from servelab.load import Load, Target, load_scenario, payload
from servelab.load.datasets import Prompt, parse_synthetic, read_dataset

TARGET = Target("t", "http://h:1", "m")


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_every_kind_of_line_with_its_output_length(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.jsonl", [
        {"prompt": "a", "max_tokens": 7},
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "b"}], "max_tokens": 9},
        {"conversations": [{"from": "human", "value": "c"}, {"from": "gpt", "value": "a recorded reply"}]},
        {"text": "d"},
    ])  # fmt: skip
    data = read_dataset(path)
    assert data.prompts == (
        Prompt((("user", "a"),), 7),
        Prompt((("system", "be brief"), ("user", "b")), 9),
        Prompt((("user", "c"),), None, "a recorded reply"),
        Prompt((("user", "d"),), None),
    )
    scenario = load_scenario(str(path))
    chat = scenario.messages(1, "nonce1")
    assert chat == [{"role": "system", "content": "[nonce1] be brief"}, {"role": "user", "content": "b"}]
    bodies = [payload(TARGET, scenario, scenario.messages(i, ""), Load(), i) for i in range(4)]
    assert [b["max_tokens"] for b in bodies] == [7, 9, 128, 128]  # the data's, else the scenario's default
    assert payload(TARGET, scenario, chat, Load(max_tokens=3), 0)["max_tokens"] == 3  # --max-tokens wins


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("{nope", "line 2: not JSON"),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}, "end with a user"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0] wants a role"),
        ({"prompt": "x", "max_tokens": 0}, '"max_tokens" is a whole number'),
        ({"prompt": "x", "max_tokens": True}, '"max_tokens" is a whole number'),
        ({"title": "no prompt"}, 'no "prompt"'),
        ([1, 2], "a JSON object"),
    ],
)
def test_a_bad_line_is_named_and_stops_or_is_skipped(tmp_path: Path, line: object, said: str) -> None:
    path = _write(tmp_path / "d.jsonl", [{"prompt": "ok"}, line, {"prompt": "also ok"}])
    with pytest.raises(UsageError, match="line 2") as stopped:
        read_dataset(path)
    assert said in str(stopped.value) and "--bad-lines skip" in (stopped.value.hint or "")
    data = read_dataset(path, "skip")
    assert [p.user for p in data.prompts] == ["ok", "also ok"] and len(data.skipped) == 1 and said in data.skipped[0]
    assert load_scenario(str(path), "skip").notes == data.skipped


def test_synthetic_lengths_fixed_and_drawn() -> None:
    fixed = load_scenario("synthetic:512:128")
    assert fixed.synthetic is not None and fixed.synthetic.lengths(3) == (512, 128)
    assert fixed.output_tokens(5) == 128 and len(fixed.messages(0, "")) == 1
    drawn = parse_synthetic("synthetic:100-200:10-20")
    lengths = [drawn.lengths(i) for i in range(50)]
    assert all(100 <= a <= 200 and 10 <= b <= 20 for a, b in lengths) and len(set(lengths)) > 10
    assert lengths == [drawn.lengths(i) for i in range(50)]  # seeded: the same every run
    short, long = load_scenario("synthetic:120:1"), load_scenario("synthetic:1200:1")
    assert len(long.messages(0, "")[0]["content"]) > 8 * len(short.messages(0, "")[0]["content"])
    for bad in ("synthetic:0:5", "synthetic:9-3:5", "synthetic:x:5", "synthetic:5"):
        with pytest.raises(UsageError):
            load_scenario(bad)
