"""The affine byte bound of a chat template (gateway/admission/affine.py) against the template's own render, on
generated conversations: never below the rendered bytes; templates outside its syntax are refused, not bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.gateway.admission import ChatTemplate, Uncountable
from tests.fixtures.prompt_strategies import TEXT

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are helpful<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA2 = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}"
)
FIRST_SYSTEM = "{{ messages[0]['content'] }}{% for m in messages %}{{ m.role ~ ': ' ~ m.content }}\n{% endfor %}"
NOT_AFFINE = [
    "{% for m in messages %}{{ m['content'] | upper }}{% endfor %}",  # a filter may grow the text
    "{% set x = messages[0]['content'] %}{% for m in messages %}{{ x }}{% endfor %}",
    "{% for m in messages %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endfor %}",
    "{% macro f(x) %}{{ x }}{{ x }}{% endmacro %}{% for m in messages %}{{ f(m['content']) }}{% endfor %}",
    "{% for m in messages %}{{ loop.index }}{{ m['content'] }}{% endfor %}",
    "{% for m in messages %}{{ m['content'] * 3 }}{% endfor %}",
]
MESSAGES = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "x" * 50]), "content": TEXT}),
    min_size=1, max_size=5,
)  # fmt: skip
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
CHECKS = [HealthCheck.too_slow]


@pytest.mark.parametrize("source", [CHATML, LLAMA2, FIRST_SYSTEM])
@settings(max_examples=400, deadline=None, suppress_health_check=CHECKS)
@given(messages=MESSAGES, generation=st.booleans())
def test_the_bound_is_never_below_the_rendered_bytes(source: str, messages: list[Any], generation: bool) -> None:
    template = ChatTemplate(source, SPECIAL)
    assert template.affine is not None
    context = {**SPECIAL, "add_generation_prompt": generation}
    try:
        rendered = template.render({**context, "messages": messages})
    except Uncountable:
        return  # the template refused the conversation: the engine prefills nothing
    bound = template.affine.bytes(messages, context)
    assert bound is not None and bound >= len(rendered.encode())


@pytest.mark.parametrize("source", NOT_AFFINE)
def test_a_template_outside_the_affine_syntax_is_not_bounded(source: str) -> None:
    assert ChatTemplate(source, {}).affine is None


def test_a_field_that_is_not_text_gives_no_bound() -> None:
    template = ChatTemplate("{% for m in messages %}{{ m['tool_calls'] }}{% endfor %}", {})
    assert template.affine is not None
    assert template.affine.bytes([{"role": "assistant", "tool_calls": [{"x": 1}]}], {}) is None


def test_the_models_own_template_is_bounded(model_folder: Path) -> None:
    from servelab.gateway.admission import TokenCounter

    counter = TokenCounter.from_folder(model_folder)
    assert counter.template is not None and counter.template.affine is not None
    body = {"messages": [{"role": "user", "content": "hi"}]}
    quick = counter.count("/v1/chat/completions", body, bound_max=1024)
    assert quick.method == "bound" and quick.tokens >= counter.count("/v1/chat/completions", body, 0).tokens
