"""Session specs: the presets, a user's TOML file (an unknown key refused with the nearest known one, a wrong value
in a sentence), fitting to a target's context (a preset scaled and said, a user's spec refused), the options."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.core.errors import UsageError
from servelab.load.scenarios import load_scenario
from servelab.load.sessions import (
    fit_spec,
    needed,
    parse_think,
    preset,
    preset_names,
    read_spec,
    session_script,
    with_session_options,
)

GOOD = """
name = "my-agent"
sessions = 3
turns = 5
head_tokens = [1000, 2000]
turn_tokens = 300
output_tokens = [50, 100]
tool_share = 0.5
think_time_s = {exponential = 1.5}
summary_tokens = 200
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def test_a_spec_file_reads_into_a_scenario(tmp_path: Path) -> None:
    scenario = load_scenario(str(_write(tmp_path, GOOD)))
    spec = scenario.sessions
    assert spec is not None and spec.name == "my-agent" and scenario.concurrency == 3
    assert (spec.head_tokens.low, spec.head_tokens.high, spec.turn_tokens.low) == (1000, 2000, 300)
    assert spec.think_time_s.exponential == 1.5 and not spec.preset
    assert scenario.max_tokens == 100  # the longest reply: what a context check reads


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (GOOD.replace("turn_tokens", "trun_tokens"), "unknown key 'trun_tokens' (did you mean 'turn_tokens'?)"),
        (GOOD.replace("{exponential", "{exponentail"), "'think_time_s.exponentail' (did you mean 'exponential'?)"),
        (GOOD + "prest = 1\n", "unknown key 'prest'"),
        (GOOD.replace("[1000, 2000]", "[2000, 1000]"), "head_tokens: Value error, low 2000 is above high 1000"),
        (GOOD.replace("tool_share = 0.5", "tool_share = 2"), "tool_share: Input should be less than or equal to 1"),
        (GOOD.replace("turn_tokens = 300\n", ""), "turn_tokens is missing"),
        (GOOD + "preset = true\n", "unknown key 'preset'"),
        ("head_tokens = [", "is not valid TOML"),
    ],
)
def test_a_bad_spec_is_refused_in_a_sentence(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        read_spec(_write(tmp_path, text))
    assert said in str(caught.value)


def test_a_missing_spec_file_is_said(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no session spec file"):
        load_scenario(str(tmp_path / "nope.toml"))


@pytest.mark.parametrize("name", preset_names())
def test_presets_run_as_written_at_their_context_and_scaled_below_it(name: str) -> None:
    spec = preset(name)
    assert spec.context is not None
    assert fit_spec(spec, spec.context, "big") == (spec, None)
    small, told = fit_spec(spec, 8192, "small")
    assert told is not None and "scaled by" in told and "small's 8,192" in told
    assert needed(small) <= 8192 and small.output_tokens == spec.output_tokens  # replies keep their length
    assert small.head_tokens.high < spec.head_tokens.high
    assert small.turns == spec.turns


def test_the_agentic_preset_is_the_seeds_shape() -> None:
    """A 20-40K head, tool results of 1-8K, replies of 200-800, past 100K over its turns."""
    spec = preset("agentic-coding")
    assert (spec.head_tokens.low, spec.head_tokens.high) == (20_000, 40_000)
    assert (spec.turn_tokens.low, spec.turn_tokens.high) == (1_000, 8_000)
    assert (spec.output_tokens.low, spec.output_tokens.high) == (200, 800)
    script = session_script(spec, 0)
    grown = script.head_tokens + sum(t.new_tokens + t.output_tokens for t in script.turns)
    assert grown > 100_000 and sum(t.tool for t in script.turns) > len(script.turns) // 2


def test_a_users_spec_too_long_for_the_context_is_refused_not_scaled(tmp_path: Path) -> None:
    spec = read_spec(_write(tmp_path, GOOD.replace("[1000, 2000]", "[9000, 9000]")))
    with pytest.raises(UsageError, match="cannot run within small's context of 8,192 tokens"):
        fit_spec(spec, 8192, "small")
    assert fit_spec(spec, 16_384, "big") == (spec, None)


def test_a_compact_at_below_a_compacted_turn_is_refused(tmp_path: Path) -> None:
    spec = read_spec(_write(tmp_path, GOOD + "compact_at = 1500\n"))
    with pytest.raises(UsageError, match="compact_at of 1,500"):
        fit_spec(spec, 32_768, "big")


def test_think_times_and_the_options(tmp_path: Path) -> None:
    assert (parse_think("2").low, parse_think("2").high) == (2.0, 2.0)
    assert (parse_think("0.5-3").low, parse_think("0.5-3").high) == (0.5, 3.0)
    assert parse_think("exp:2").exponential == 2.0
    for bad in ("soon", "3-1", "exp:-1"):
        with pytest.raises(UsageError, match="--think-time"):
            parse_think(bad)
    scenarios = [load_scenario("agentic-coding"), load_scenario("code-chat")]
    got = with_session_options(scenarios, sessions=7, turns=3, think_time="0")
    assert got[0].sessions is not None and (got[0].sessions.sessions, got[0].sessions.turns) == (7, 3)
    assert got[0].concurrency == 7 and got[1] == scenarios[1]
    with pytest.raises(UsageError, match="need a session scenario"):
        with_session_options([load_scenario("code-chat")], sessions=2, turns=None, think_time=None)
