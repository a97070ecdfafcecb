"""The session history's rules, over generated specs and replies: each turn's prompt extends the previous prompt and
the reply the model streamed, unless the history was compacted; no prompt passes the context (counted exactly, by
the truth fixture's tokenizer); scripts and texts are the same for the same seed."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.core.errors import UsageError
from servelab.load.runner import CHAT_MARGIN
from servelab.load.sessions import SessionSpec, fit_spec, preset, session_script
from servelab.load.sessions.run import Texts, start_conversation, turn_prompt
from servelab.testing.cache_sim import render

WORDS_PER_LINE = 8  # filler_text's "line N: w w w w w w." in whitespace tokens, the fixture's tokenizer


@st.composite
def specs(draw: st.DrawFn) -> SessionSpec:
    head_low = draw(st.integers(1, 3000))
    turn_low = draw(st.integers(1, 2000))
    out_low = draw(st.integers(1, 500))
    return SessionSpec.model_validate(
        {
            "name": "gen",
            "turns": draw(st.integers(1, 25)),
            "head_tokens": [head_low, head_low + draw(st.integers(0, 3000))],
            "shared_tokens": draw(st.integers(0, head_low)),
            "turn_tokens": [turn_low, turn_low + draw(st.integers(0, 2000))],
            "output_tokens": [out_low, out_low + draw(st.integers(0, 500))],
            "tool_share": draw(st.floats(0, 1)),
            "summary_tokens": draw(st.integers(1, 2000)),
            "compact_at": draw(st.none() | st.integers(500, 20_000)),
            "preset": draw(st.booleans()),
        }
    )


def _reply(rng: random.Random, most: int) -> str:
    return " ".join(rng.choice(("ok", "def", "x", "return")) for _ in range(rng.randint(0, most)))


@settings(max_examples=150, deadline=None)
@given(spec=specs(), context=st.integers(2_000, 40_000), seed=st.integers(0, 10**6), session=st.integers(0, 50))
def test_every_prompt_extends_the_last_one_and_its_reply_and_fits_the_context(
    spec: SessionSpec, context: int, seed: int, session: int
) -> None:
    try:
        spec, _ = fit_spec(spec, context, "gen")
    except UsageError:
        return  # refused before anything is sent: nothing to check
    texts, rng = Texts(spec.name, WORDS_PER_LINE), random.Random(seed)
    talk = start_conversation(spec, session_script(spec, session, seed), texts, context, f"n{session}")
    last: list[dict[str, object]] | None = None
    reply = ""
    for turn in session_script(spec, session, seed).turns:
        prompt = turn_prompt(talk, texts, turn)
        sent = len(render(prompt.messages))
        assert prompt.fits, "a spec fit_spec accepted ran out of room"
        assert sent <= prompt.estimated_tokens, "the history's bound is below what the server counts"
        assert sent + turn.output_tokens + CHAT_MARGIN <= context
        if last is not None and not prompt.compacted:
            before = len(last)
            assert [_plain(m) for m in prompt.messages[:before]] == [_plain(m) for m in last]
            assert prompt.messages[before]["role"] == "assistant"
            assert prompt.messages[before]["content"] == reply
            assert len(prompt.messages) == before + 2
        if prompt.compacted:
            assert prompt.messages[0] == talk.head[0] and len(prompt.messages) == 2
            assert str(prompt.messages[1]["content"]).startswith("Summary of the conversation so far:")
        reply = _reply(rng, turn.output_tokens)
        last = prompt.messages
        talk.answered(reply, [], sent, len(reply.split()))


def _plain(message: dict[str, object]) -> dict[str, object]:
    """A message without the tool call a tool turn adds to the reply before it (the reply's text is kept)."""
    return {k: v for k, v in message.items() if k != "tool_calls"}


def test_a_tool_turn_answers_the_call_added_to_the_reply_in_the_openai_shape() -> None:
    spec = SessionSpec.model_validate(
        {"turns": 3, "head_tokens": 100, "turn_tokens": 50, "output_tokens": 20, "tool_share": 1.0}
    )
    texts = Texts(spec.name, WORDS_PER_LINE)
    script = session_script(spec, 0)
    talk = start_conversation(spec, script, texts, 8192, "n")
    first = turn_prompt(talk, texts, script.turns[0])
    assert first.messages[-1]["role"] == "user"  # a first turn has no call to answer
    talk.answered("reading it", [], None, 2)
    second = turn_prompt(talk, texts, script.turns[1]).messages
    call = second[-2]["tool_calls"][0]
    assert second[-2]["content"] == "reading it" and call["type"] == "function"
    assert set(call["function"]) == {"name", "arguments"} and isinstance(call["function"]["arguments"], str)
    assert second[-1] == {"role": "tool", "tool_call_id": call["id"], "content": second[-1]["content"]}


def test_a_call_the_model_streamed_is_the_one_answered() -> None:
    spec = SessionSpec.model_validate(
        {"turns": 2, "head_tokens": 100, "turn_tokens": 50, "output_tokens": 20, "tool_share": 1.0}
    )
    texts = Texts(spec.name, WORDS_PER_LINE)
    script = session_script(spec, 0)
    talk = start_conversation(spec, script, texts, 8192, "n")
    turn_prompt(talk, texts, script.turns[0])
    own = {"id": "call_model", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    talk.answered("", [own], None, 5)
    messages = turn_prompt(talk, texts, script.turns[1]).messages
    assert messages[-2]["tool_calls"] == [own] and messages[-1]["tool_call_id"] == "call_model"


@pytest.mark.parametrize("name", ["agentic-coding", "character-chat-sessions"])
def test_scripts_and_texts_are_the_same_for_the_same_seed(name: str) -> None:
    spec = preset(name)
    assert session_script(spec, 3, seed=7) == session_script(spec, 3, seed=7)
    assert session_script(spec, 3, seed=7) != session_script(spec, 4, seed=7)
    assert session_script(spec, 3, seed=7) != session_script(spec, 3, seed=8)
    texts = Texts(spec.name)
    script = session_script(spec, 3, seed=7)
    assert texts.head(script, spec.shared_tokens, "a") == texts.head(script, spec.shared_tokens, "a")
    heads = {texts.head(session_script(spec, i), spec.shared_tokens, "same") for i in range(3)}
    assert len(heads) == 3  # each session's own head, the nonce aside


def test_the_history_grows_past_the_limit_and_is_compacted_there() -> None:
    """agentic-coding at 8K (scaled): sessions of 30 turns pass the context and go on from a summary."""
    spec, told = fit_spec(preset("agentic-coding"), 8192, "small")
    assert told is not None and "scaled by 0.0625" in told
    texts = Texts(spec.name, WORDS_PER_LINE)
    script = session_script(spec, 0)
    talk = start_conversation(spec, script, texts, 8192, "n")
    sizes, compacted = [], []
    for turn in script.turns:
        prompt = turn_prompt(talk, texts, turn)
        sizes.append(len(render(prompt.messages)))
        compacted.append(prompt.compacted)
        assert sizes[-1] + turn.output_tokens + CHAT_MARGIN <= 8192
        talk.answered(" ".join(["w"] * turn.output_tokens), [], sizes[-1], turn.output_tokens)
    assert any(compacted)
    at = compacted.index(True)
    assert sizes[at] < sizes[at - 1]  # the session went on from the head and a summary
