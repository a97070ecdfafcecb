"""s27b attacks on the admission count, each a finding against cbc94b7 and held since: the continued message cut
both ways where a clock output decides transformers' branch, text parts in vLLM's key order (its known keys
dropped), tool-call arguments that are not an object rendered as {}, Claude Code's billing header stripped from
system text as vLLM does."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.unit.gateway.test_admission_attack_s27 import _assert_not_below, _engine_chat, _figure, _folder


class _Day6(datetime):
    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        return datetime(2026, 12, 6, 7, 0, 0)


def _engine_on_day_6(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.utils import chat_template_utils

    monkeypatch.setattr(chat_template_utils, "datetime", _Day6)


# ---- A. the cut's rstrip branch is decided by a clock output next to the tag -----------------------------------
TRIM_THEN_DAY = ("{% for message in messages %}{{ message['content'] | trim }}{% endfor %}"
                 "{{ strftime_now('%e') }}")  # fmt: skip


def test_rstrip_branch_depends_on_the_date(model_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tag's trailing space is trimmed by the template; what follows the tag is strftime_now('%e'): at the
    reference date (the 27th) "27" (rstrip branch: the whitespace before the tag is cut off), on the 1st-9th " 6"
    (the exact branch: the whitespace stays in the prompt)."""
    _engine_on_day_6(monkeypatch)
    folder = _folder(tmp_path, model_folder, "cfm_clock", TRIM_THEN_DAY)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"},
                                       {"role": "assistant", "content": "ok" + " \u3000\t\n" * 3000}],
            "continue_final_message": True, "add_generation_prompt": False}  # fmt: skip
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))


# ---- B. the engine drops Claude Code's billing header line from system text; a template can branch on it ------
DEFAULT_SYSTEM = ("{% for message in messages %}{% if message['role'] == 'system' and not message['content'] %}"
                  "{{ 'You are a helpful assistant. ' * 600 }}{% else %}{{ message['content'] }}{% endif %}"
                  "{% endfor %}")  # fmt: skip


def test_billing_header_system_text_is_dropped_by_the_engine(model_folder: Path, tmp_path: Path) -> None:
    """vLLM's _parse_chat_message_content strips a system text part that starts with "x-anthropic-billing-header"
    (its first line; the part goes when nothing follows). The count keeps it ("a larger count is safe"), but a
    template that prints a default system prompt where the system content is empty prints ~3,000 tokens more in
    the engine."""
    folder = _folder(tmp_path, model_folder, "billing", DEFAULT_SYSTEM)
    body = {"model": "m", "messages": [{"role": "system", "content": "x-anthropic-billing-header: cch=1"},
                                       {"role": "user", "content": "hi"}]}  # fmt: skip
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))


# ---- C. an openai-format text part's extra keys come after type and text in the engine -----------------------
PARTS_JSON = (
    "{% for message in messages %}{% for part in message['content'] %}{{ part|tojson }}{% endfor %}{% endfor %}"
)


def test_text_part_keys_in_the_engines_order(model_folder: Path, tmp_path: Path) -> None:
    """vLLM's _parse_chat_message_content_part (wrap_dicts) builds ``{"type": "text", "text": ...}`` then
    ``result.update(extra fields)``; messages.py:_part builds ``{**extra, "type": "text", "text": ...}``. The same
    characters in another order: ~2 tokens more per part in the engine with these values."""
    folder = _folder(tmp_path, model_folder, "part_order", PARTS_JSON)
    part = {"type": "text", "text": ",", "}": "}"}
    body = {"model": "m", "messages": [{"role": "user", "content": [part] * 3000}]}
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))


# ---- D. arguments that decode to something other than an object reach the template as {} ---------------------
CALL_LIKE = ("{% for message in messages %}{% for call in message.tool_calls %}{{ call.function.name }}"
             "({{ call.function.arguments|tojson }}){% endfor %}{% endfor %}")  # fmt: skip


def test_non_object_arguments_are_coerced_to_an_empty_object(model_folder: Path, tmp_path: Path) -> None:
    """vLLM's _postprocess_messages sets ``function["arguments"] = {}`` where the arguments string is empty, not JSON,
    or JSON that is not an object ("[]", "42", "true"); messages.py:_tool_calls keeps the decoded value ([]), so
    the count prints ``f([])`` (1 token with this tokenizer for "([])") where the engine prints ``f({})`` (2)."""
    folder = _folder(tmp_path, model_folder, "args_coerced", CALL_LIKE)
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": "[]"}}
    body = {"model": "m", "messages": [{"role": "assistant", "tool_calls": [call]}] * 3000}
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))
