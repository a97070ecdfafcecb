"""``strftime_now`` counted for any clock (gateway/admission/clock.py, regions.py): a format's widest output is at
least its output on any date; a render's exact count, bounded near each output by bytes, is at least the engine's
count of the same render made on any other date; a template that does more with the clock's value than print it
does not load."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.gateway.admission import CHAT, ChatTemplate, TemplateError, TokenCounter, Uncountable
from servelab.gateway.admission.clock import REFERENCE, max_bytes
from servelab.gateway.admission.regions import overlap_free
from tests.fixtures.prompt_strategies import TEXT

DIRECTIVES = ["%-m", "%m", "%d", "%-d", "%e", "%a", "%A", "%b", "%B", "%c", "%x", "%X", "%Y", "%y", "%H", "%-H",
              "%I", "%p", "%M", "%S", "%j", "%-j", "%U", "%W", "%s", "%G", "%V", "%%", "%Z", "%z", "%10B"]  # fmt: skip
FORMATS = st.lists(st.one_of(st.sampled_from(DIRECTIVES), st.text("ab :-/,é%5E_", max_size=3)), max_size=5).map("".join)
DATES = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 12, 31))
CHATML_CLOCK = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }} {{ strftime_now(fmt) }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA31_CLOCK = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now(fmt) %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\nToday Date: " + date_string + "\\n\\n" }}
{{- system_message }}<|im_end|>
{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\\n\\n' + message['content'] + '<|im_end|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n\\n' }}{%- endif %}"""
MESSAGES = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]), "content": TEXT}),
    min_size=1, max_size=4,
)  # fmt: skip
CHECKS = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def tokenizer(model_folder: Path) -> Any:
    """The engine's tokenizer of the embedded model (as the gateway loads it)."""
    return TokenCounter.from_folder(model_folder).tokenizer


@settings(max_examples=500, deadline=None)
@given(fmt=FORMATS, moment=DATES)
def test_a_formats_widest_output_is_never_below_any_dates(fmt: str, moment: datetime) -> None:
    try:
        widest = max_bytes(fmt)
    except Uncountable:
        return  # a format not printed directive by directive, or padded too wide: the request is long
    assert widest >= len(moment.strftime(fmt).encode())


def test_the_widest_output_is_widest_in_each_directive() -> None:
    assert max_bytes("%-m") == 2 and max_bytes("%B") == len("September") and max_bytes("%A") == len("Wednesday")
    assert max_bytes("%d %b %Y") == 11 and max_bytes("%c") == len(REFERENCE.strftime("%c"))


@pytest.mark.parametrize("source", [CHATML_CLOCK, LLAMA31_CLOCK])
@settings(max_examples=60, deadline=None, suppress_health_check=CHECKS)
@given(messages=MESSAGES, fmt=st.sampled_from(["%-m", "%d %b %Y", "%A %-d %B", "%c", "%Y-%m-%d %H:%M"]), moment=DATES)
def test_the_count_is_never_below_the_render_of_any_date(
    source: str, messages: list[Any], fmt: str, moment: datetime, tokenizer: Any
) -> None:
    """The engine's text on ``moment`` is the reference render with each output at that date: its exact tokens (the
    engine's tokenizer) never exceed the figure made at the reference date."""
    template = ChatTemplate(source, {"bos_token": "<|im_start|>"})
    counter = TokenCounter(tokenizer, template)
    body = {"messages": messages, "chat_template_kwargs": {"fmt": fmt}}
    try:
        rendered = template.render_spans({"messages": messages, "fmt": fmt, "add_generation_prompt": True})
        figure = counter.count(CHAT, body, 0).tokens
    except Uncountable:
        return
    pieces, at = [], 0
    for span in rendered.clock:
        pieces += [rendered.text[at : span.start], moment.strftime(fmt)]
        at = span.end
    engine_text = "".join([*pieces, rendered.text[at:]])
    assert figure >= len(counter.tokenizer.encode(engine_text, add_special_tokens=True).ids)
    assert counter.count(CHAT, body, 1 << 40).tokens >= len(engine_text.encode())  # the byte bound, too


def test_a_prompt_that_forges_the_clocks_marker_is_uncounted(tokenizer: Any) -> None:
    counter = TokenCounter(tokenizer, ChatTemplate(CHATML_CLOCK, {}))
    body = {"messages": [{"role": "user", "content": "\ufdd0abc0\ufdd1"}], "chat_template_kwargs": {"fmt": "%d"}}
    with pytest.raises(Uncountable):
        counter.count(CHAT, body, 0)


@pytest.mark.parametrize(
    "source",
    [
        "{{ strftime_now('%d') | upper }}",
        "{% if strftime_now('%m') == '12' %}{{ messages }}{% endif %}",
        "{% set d = strftime_now('%d') %}{{ d[:1] }}",
        "{% set d = strftime_now('%d') %}{% set e = d + 'x' %}{% if e | length > 3 %}x{% endif %}",
        "{% macro f() %}{{ strftime_now('%d') }}{% endmacro %}{{ f() | length }}",
        "{% set d %}{{ strftime_now('%d') }}{% endset %}{{ d | length }}",
        "{{ (strftime_now)('%d') }}{% set f = strftime_now %}",
    ],
)
def test_a_template_that_uses_the_clocks_value_does_not_load(source: str) -> None:
    with pytest.raises(TemplateError):
        ChatTemplate(source, {})


@pytest.mark.parametrize(
    "source",
    [
        LLAMA31_CLOCK,
        "{{ 'Today: ' ~ strftime_now('%d') ~ '\\n' }}{{ strftime_now('%B') if add_generation_prompt else '' }}",
        "{% set d %}Date: {{ strftime_now('%d') }}{% endset %}{{ d }}",
    ],
)
def test_a_template_that_prints_the_clock_loads(source: str) -> None:
    ChatTemplate(source, {})


def test_overlapping_added_tokens_are_found() -> None:
    assert overlap_free({"<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "ell"})
    assert not overlap_free({"aa"})  # overlaps itself, shifted
    assert not overlap_free({"<a>", "a>b"})  # a suffix of one is a prefix of the other
    assert not overlap_free({"<a>", "x<a>y"})  # one inside another
