"""Second attack on the admission after its rewrite (837b34f, c8fd8b6): inputs whose figure falls below the engine's
own count of the prompt it prefills. Each test failed on the code it was written against and passes since the fix
(clock.py's allow-list of where a clock output may sit; messages.py's consolidation as vLLM's); the truth is the
engine's path in process (tests/fixtures/vllm_truth.py: vLLM's request validation, template resolution, message
conversion and developer-role handling; transformers' AutoTokenizer and apply_chat_template).

Classes:
1. a template can read back what it rendered (a ``{% block %}`` through ``self.<block>()``, a recursive loop through
   ``loop(...)``); the count renders ``strftime_now`` as a marker, not as a date, so a template that reads its own
   output branches on the marker where the engine branches on the date (clock.py:check_printed / _printed_into).
2. vLLM merges every system message into one at position 0 when it turns a ``developer`` message into a system one
   (``_consolidate_system_messages``, for a template without the developer role); the count renames the role only,
   so a template that renders the system prompt from ``messages[0]`` sees a different conversation
   (messages.py:_message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servelab.gateway.admission import TemplateError, TokenCounter
from tests.fixtures.vllm_truth import engine_count
from tests.unit.gateway.model_folders import LONG_AT, copy_folder, figure
from tests.unit.gateway.model_folders import assert_not_below as _assert_not_below

MESSAGES = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")  # fmt: skip


def _engine_chat(folder: Path, body: dict[str, Any]) -> int:
    """vLLM 0.32's chat path (tests/fixtures/vllm_truth.py), with the folder's tokenizer loaded afresh."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return engine_count(folder, json.loads(json.dumps(body)), tokenizer)


def _figure(folder: Path, body: dict[str, Any]) -> Any:
    return figure(TokenCounter.from_folder(folder), body)


# ---- 1. a template that reads back its own output sees the clock's marker, not a date ----------------------------
READ_BACK = {
    "block through self": "{% block day %}{{ strftime_now('%d') }}{% endblock %}\n"
    "{% if self.day()|length < 5 %}" + MESSAGES + "{% endif %}",
    "recursive loop": "{% for x in [[0]] recursive %}{% if x is iterable %}{% if loop(x)|length < 5 %}" + MESSAGES
    + "{% endif %}{% else %}{{ strftime_now('%d') }}{% endif %}{% endfor %}",
}  # fmt: skip


@pytest.mark.parametrize("how", sorted(READ_BACK))
def test_a_template_that_reads_back_its_output_sees_the_marker(model_folder: Path, tmp_path: Path, how: str) -> None:
    """Class: the count renders each ``strftime_now`` call as a marker (U+FDD0, a 16-hex nonce, an index, U+FDD1: 19+
    characters) and replaces it after the render, so it is sound only where the template never looks at that value.
    check_printed enforces this on the call and on names assigned from it, but a template can read back text it
    already rendered without naming either: a ``{% block %}`` is callable as ``self.<name>()`` (and ``super()``), a
    recursive loop's body as ``loop(...)``; both return the rendered text, marker included. The engine's template sees
    the real date (2 characters for ``%d``), the count's sees the marker (19), so any test on it branches apart.

    Where: src/servelab/gateway/admission/clock.py:168-191 (``_sink``/``_printed_into``: an Output inside a ``Block``
    or a ``For ... recursive`` is taken as printed to the prompt; only Macro/CallBlock/FilterBlock are refused) and
    clock.py:48-52 (the marker stands in for the value during the render).

    Input: a template that renders the messages only when ``self.day()|length < 5`` (or ``loop(x)|length < 5``), one
    user message of ``"hello world " * 5000``. Expected: >= the engine's ~10,000 tokens (long). Observed: 0-2 tokens
    (``bound``): the marker is 19 characters, the branch is skipped, a long prompt is admitted locally."""
    folder = copy_folder(tmp_path, model_folder, "read_back")
    (folder / "chat_template.jinja").write_text(READ_BACK[how])
    body = {"model": "m", "messages": [{"role": "user", "content": "hello world " * 5000}]}
    truth = _engine_chat(folder, body)
    assert truth > LONG_AT
    # fixed: an output under anything but the template, if-branches and plain loops is refused at load, so the
    # gateway counts with the engine's /tokenize (its own count)
    with pytest.raises(TemplateError, match="strftime_now"):
        TokenCounter.from_folder(folder)
    (folder / "chat_template.jinja").write_text(READ_BACK[how].replace("strftime_now('%d')", "'27'"))
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))  # without the clock: counted, not below


# ---- 2. vLLM consolidates system messages after turning developer into system -----------------------------------
SYSTEM_FIRST = ("{% if messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
                "{% endif %}{% for message in messages %}{% if message['role'] != 'system' %}<|im_start|>"
                "{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")  # fmt: skip


@pytest.mark.parametrize("first", ["user", "system"])
def test_developer_messages_are_merged_into_the_first_system_message(
    model_folder: Path, tmp_path: Path, first: str
) -> None:
    """Class: the conversation the engine hands the template is not the request's messages with roles renamed. When
    the template has no developer role, vLLM's ``safe_apply_chat_template`` runs ``_convert_developer_to_system`` and
    then ``_consolidate_system_messages``: every system message (the converted developer ones included) is joined
    with ``"\\n\\n"`` into ONE system message moved to position 0. servelab renames ``developer`` to ``system`` in
    place and keeps the messages apart, so a template that renders the system prompt from ``messages[0]`` only (the
    common "optional leading system message" pattern) renders the developer text in the engine and not in the count.

    Where: src/servelab/gateway/admission/messages.py:48-49 (``role = "system"``, no consolidation) as used by
    counter.py:144 (affine bound) and counter.py:172 (render).

    Input: ``[{"role": "user", "content": "hi"}, {"role": "developer", "content": "rule " * 9000}]`` (and the same
    after a leading system message "hi"). Expected: >= the engine's ~9,000 tokens. Observed: ~50 (``bound``)."""
    folder = copy_folder(tmp_path, model_folder, "developer")
    (folder / "chat_template.jinja").write_text(SYSTEM_FIRST)
    body = {
        "model": "m",
        "messages": [{"role": first, "content": "hi"}, {"role": "developer", "content": "rule " * 9000}],
    }
    truth = _engine_chat(folder, body)
    assert truth > LONG_AT
    _assert_not_below(_figure(folder, body), truth)
