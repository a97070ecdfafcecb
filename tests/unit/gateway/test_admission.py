"""The admission's token figure against the engine's own tokenizer and template (the embedded engine's
SmolLM2 folder), by construction and on generated prompts: the byte bound never falls below the exact count,
every field each endpoint prefills is counted, and what cannot be counted is long."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from servelab.gateway.admission import CHAT, COMPLETIONS, TokenCounter, Uncountable
from servelab.gateway.estimate import Admission
from tests.fixtures.prompt_strategies import CHAT_BODY, COMPLETIONS_BODY, TEXT

CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def counter(model_folder: Path) -> TokenCounter:
    return TokenCounter.from_folder(model_folder)


@pytest.fixture(scope="module")
def reference(model_folder: Path) -> Any:
    """transformers' own tokenizer and apply_chat_template: a renderer servelab does not share."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(model_folder), local_files_only=True)


def _chat(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


@settings(max_examples=2000, deadline=None, suppress_health_check=CHECKS)
@given(text=TEXT)
def test_the_byte_bound_is_never_below_the_exact_count(counter: TokenCounter, text: str) -> None:
    assert counter.byte_bound
    bound = counter.count(COMPLETIONS, {"prompt": text or " "}, bound_max=1 << 40)
    exact = counter.count(COMPLETIONS, {"prompt": text or " "}, bound_max=0)
    assert bound.method == "bound" and exact.method == "exact"
    assert bound.tokens >= exact.tokens


@settings(max_examples=1500, deadline=None, suppress_health_check=CHECKS)
@given(text=TEXT)
def test_a_chat_is_counted_as_transformers_renders_and_tokenizes_it(
    counter: TokenCounter, reference: Any, text: str
) -> None:
    body = _chat(text)
    real = len(reference.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"])  # fmt: skip
    assert counter.count(CHAT, {**body}, bound_max=0).tokens >= real
    assert counter.count(CHAT, {**body}, bound_max=1 << 40).tokens >= real


@settings(max_examples=1500, deadline=None, suppress_health_check=CHECKS)
@given(body=CHAT_BODY)
def test_a_generated_chat_is_counted_or_long(counter: TokenCounter, body: dict[str, Any]) -> None:
    """Every generated chat is counted (bound or exact, bound >= exact) or refused as uncountable, never 0."""
    try:
        exact = counter.count(CHAT, body, bound_max=0)
    except Uncountable:
        return
    assert exact.tokens > 0 and counter.count(CHAT, body, bound_max=1 << 40).tokens >= exact.tokens


@settings(max_examples=1000, deadline=None, suppress_health_check=CHECKS)
@given(body=COMPLETIONS_BODY)
def test_every_completions_prompt_form_is_counted(counter: TokenCounter, body: dict[str, Any]) -> None:
    if "messages" in body:  # a field /v1/completions does not read: not trusted, so long
        with pytest.raises(Uncountable):
            counter.count(COMPLETIONS, body, bound_max=0)
        return
    prompt, times = body["prompt"], max(_n(body.get("n")), _n(body.get("best_of")))
    if isinstance(prompt, str):
        real = len(counter.tokenizer.encode(prompt).ids)
    elif all(isinstance(p, str) for p in prompt):
        real = sum(len(counter.tokenizer.encode(p).ids) for p in prompt)
    elif all(isinstance(p, int) for p in prompt):
        real = len(prompt)
    else:
        real = sum(len(p) for p in prompt)
    assert counter.count(COMPLETIONS, body, bound_max=0).tokens >= real * times


def _n(value: Any) -> int:
    import math

    return 1 if value is None else max(1, math.ceil(float(value)))


def test_the_classes_the_four_bytes_guess_missed(counter: TokenCounter) -> None:
    """Digits are a token a byte, emoji and CJK several a character: each counted at or above the real count."""
    for text in ("7" * 23000, "😀" * 5800, "日本語の文章です。" * 2000):
        real = len(counter.tokenizer.encode(text).ids)
        assert counter.count(CHAT, _chat(text), bound_max=0).tokens >= real > len(text.encode()) / 4


def test_fields_the_engine_prefills_are_read_by_endpoint(counter: TokenCounter) -> None:
    long = "1" * 30000
    with pytest.raises(Uncountable):  # a field the endpoint does not read is not trusted to be harmless: long
        counter.count(COMPLETIONS, {"prompt": long, "messages": []}, 0)
    for part in ({"type": "refusal", "refusal": long}, {"type": "thinking", "thinking": long},
                 {"type": "output_text", "text": long}, long):  # fmt: skip
        assert counter.count(CHAT, {"messages": [{"role": "user", "content": [part]}]}, 0).tokens >= 30000
    assert counter.count(COMPLETIONS, {"prompt": [long, long]}, 0).tokens >= 60000
    assert counter.count(COMPLETIONS, {"prompt": [[1] * 15000, [2] * 15000]}, 0).tokens == 30000
    assert counter.count(COMPLETIONS, {"prompt": list(range(15000))}, 0).tokens == 15000
    assert counter.count(COMPLETIONS, {"prompt": "hi", "n": "4", "best_of": 6.0}, 0).tokens >= 6
    assert counter.count(CHAT, {"messages": [{"role": long, "content": "hi"}]}, 0).tokens >= 30000


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA"}}]}]},
        {"messages": [{"role": "user", "content": [{"text": "no type"}]}]},
        {"messages": [{"role": "user", "content": 7}]},
        {"messages": [{"role": "user", "content": "hi"}], "chat_template": "{{ messages }}"},
        {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}},
        {"messages": "hi"},
        {"messages": [{"role": "user", "content": "hi"}], "n": "many"},
        {"messages": [{"role": "user", "content": "hi"}], "n": 1e300},
    ],
)
def test_what_cannot_be_counted_raises(counter: TokenCounter, body: dict[str, Any]) -> None:
    with pytest.raises(Uncountable):
        counter.count(CHAT, body, bound_max=1 << 40)


@pytest.mark.parametrize("prompt", [None, [], [[]], ["a", 1], [1.5], [[1], "a"], {"a": 1}, [True]])
def test_a_prompt_of_no_known_form_raises(counter: TokenCounter, prompt: Any) -> None:
    with pytest.raises(Uncountable):
        counter.count(COMPLETIONS, {"prompt": prompt}, bound_max=1 << 40)


def test_the_admission_fails_closed(counter: TokenCounter) -> None:
    """An uncountable request gets the long figure; without a counter in process, a failed engine count does too
    (never a guess), and a counted one is multiplied by its fan-out."""

    async def refused(body: dict[str, Any]) -> int | None:
        return None

    async def engine(body: dict[str, Any]) -> int | None:
        return 100

    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    local = Admission(counter, refused, long_figure=16001, bound_max=1024, long_at=8000)
    got = asyncio.run(local.figure(CHAT, image, b"x" * 100))
    assert (got.tokens, got.method) == (16001, "uncounted") and "image_url" in got.why
    remote = Admission(None, refused, long_figure=16001, bound_max=1024, long_at=8000)
    assert asyncio.run(remote.figure(COMPLETIONS, {"prompt": ["a", "b"]}, b"x" * 10)).method == "uncounted"
    counted = Admission(None, engine, long_figure=16001, bound_max=1024, long_at=8000)
    got = asyncio.run(counted.figure(COMPLETIONS, {"prompt": ["a", "b", [1, 2]], "n": 2}, b"x" * 10))
    assert got.method == "uncounted"  # a mixed batch is not a prompt form the engine takes
    got = asyncio.run(counted.figure(COMPLETIONS, {"prompt": ["a", "b"], "n": 2}, b"x" * 10))
    assert (got.tokens, got.method) == (400, "engine")
    big = asyncio.run(Admission(counter, refused, 16001, 1024, 50000).figure(CHAT, _chat("9" * 40000), b"9" * 40100))
    assert big.method == "exact" and big.tokens >= 40000  # counted off the event loop, the same figure


def test_a_prompt_long_by_its_fewest_tokens_is_not_tokenized(counter: TokenCounter) -> None:
    """A text can make no fewer tokens than its bytes over the longest token's: past the threshold by that, the
    request is long at its byte bound and no exact count is spent on it (a 16 MiB body cannot pin a core)."""
    text = "7" * (counter.longest * 8000 + counter.longest)
    got = counter.count(COMPLETIONS, {"prompt": text}, bound_max=1024, long_at=8000)
    assert got.method == "bound" and got.tokens >= len(text)
    under = counter.count(COMPLETIONS, {"prompt": "7" * 9000}, bound_max=1024, long_at=8000)
    assert under.method == "exact" and under.tokens >= 9000  # could be under the threshold: counted


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "extra",
    [
        {"chat_template_kwargs": {"tokenize": True, "padding": "max_length", "max_length": 8150}},
        {"chat_template_kwargs": {"tokenize": True, "tokenizer_kwargs": {"text_pair": "7" * 8100}}},
        {"chat_template_kwargs": {"add_generation_prompt": False}},
        {"chat_template_kwargs": {"tools": None}},
        {"chat_template_kwargs": {"return_dict": True}},
        {"kv_transfer_params": {"prompt_token_ids": [0] * 8150}},
        {"mm_payload": {"x": 1}},
        {"vllm_xargs": {"x": 1}},
        {"prompt": "ignored by chat, so not trusted"},
        {"some_field_from_next_year": 1},
    ],
)
def test_a_field_that_may_change_the_prompt_is_uncountable(counter: TokenCounter, extra: dict[str, Any]) -> None:
    """The outside attacker's classes (kwargs that reach the tokenizer call, fields that replace the prompt, kwargs
    that override the request's own fields) and any field servelab does not know: long, never counted low."""
    with pytest.raises(Uncountable):
        counter.count(CHAT, {"messages": HI, **extra}, bound_max=1 << 40, long_at=8000)


def test_template_kwargs_reach_the_template_only_by_its_own_variables(model_folder: Path) -> None:
    """A kwarg the template reads is rendered (and counted); one it does not read is dropped, as the engine drops
    it; a request field the template reads by name (reasoning_effort) is uncountable."""
    from tokenizers import Tokenizer

    from servelab.gateway.admission import ChatTemplate

    source = "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ extra or '' }}{{ reasoning_effort or '' }}"
    counter = TokenCounter(Tokenizer.from_file(str(model_folder / "tokenizer.json")), ChatTemplate(source, {}))
    plain = counter.count(CHAT, {"messages": HI}, 0).tokens
    assert counter.count(CHAT, {"messages": HI, "chat_template_kwargs": {"extra": "7" * 500}}, 0).tokens >= 500
    assert counter.count(CHAT, {"messages": HI, "chat_template_kwargs": {"unread": "7" * 500}}, 0).tokens == plain
    with pytest.raises(Uncountable):
        counter.count(CHAT, {"messages": HI, "reasoning_effort": "high"}, 0)
