"""Session 26's attack on the admission: inputs whose figure falls below the engine's own count of the prompt it
prefills. Each test FAILS on the code it was written against; the truth is the engine's path in process (vLLM's
request validation, template resolution and message conversion; transformers' AutoTokenizer and
apply_chat_template, which vLLM calls), as tests/fixtures/vllm_truth.py computes it, with the one step a finding is
about (the template vLLM resolves, the clock) done as vLLM does it.

Classes (each new; none is one input patched):
1. the template is picked by the request: a model folder with named templates (tokenizer_config.json's list, or
   additional_chat_templates/) renders "tool_use" whenever the request carries tools; servelab always renders
   "default" (counter.py:_template_source).
2. tools are handed to the template as the engine's pydantic model re-serializes them, not as sent: vLLM propagates a
   tool's ``defer_loading`` into its function (and coerces ``strict``/``defer_loading`` to booleans); servelab's
   copy of model_dump does neither (counter.py:_tools).
3. the engine's tokenizer is tokenizer.json plus what tokenizer_config.json adds (``added_tokens_decoder`` entries,
   any ``*_token`` key): transformers adds those tokens to the vocabulary, servelab counts with tokenizer.json alone
   (counter.py:from_folder), so its exact count is of another tokenizer.
4. the template's context holds every special token transformers names (any ``*_token`` key of
   tokenizer_config.json), not only the seven standard names (counter.py:SPECIAL_NAMES/_special_tokens).
5. ``strftime_now`` at a fixed "widest" date is widest in characters, not in tokens: "%-m" is "9" in September and
   "12" in December (template.py:WIDEST/_now)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from servelab.gateway.admission import CHAT, COMPLETIONS, TokenCounter
from servelab.gateway.estimate import Admission
from tests.fixtures.vllm_truth import engine_count
from tests.unit.gateway.model_folders import copy_folder, edit_config

LONG_AT, LONG_FIGURE = 8000, 16001
TEMPLATES = Path(__file__).resolve().parents[2] / "fixtures" / "admission_templates"
TOOLS_TEMPLATE = (TEMPLATES / "tools.jinja").read_text()


# ---- the engine's count, in process -------------------------------------------------------------------------
def _engine_chat(folder: Path, body: dict[str, Any]) -> int:
    """vLLM 0.32's chat path (tests/fixtures/vllm_truth.py), with the folder's tokenizer loaded afresh."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return engine_count(folder, json.loads(json.dumps(body)), tokenizer)


def _engine_completion(folder: Path, body: dict[str, Any]) -> int:
    """vLLM's /v1/completions on a text prompt: the tokenizer vLLM loads (AutoTokenizer), special tokens added."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    return sum(len(tok(p, add_special_tokens=True)["input_ids"]) for p in prompts)


def _figure(folder: Path, path: str, body: dict[str, Any]) -> Any:
    """The gateway's figure for ``body`` as its handler computes it (the raw bytes parsed by orjson)."""
    raw = json.dumps(body).encode()
    admission = Admission(TokenCounter.from_folder(folder), _never, LONG_FIGURE, 1024, LONG_AT)
    return asyncio.run(admission.figure(path, orjson.loads(raw), raw))


async def _never(body: dict[str, Any]) -> int | None:
    raise AssertionError("counted in process")


_folder, _edit_config = copy_folder, edit_config


def _assert_not_below(figure: Any, truth: int) -> None:
    assert figure.method == "uncounted" or figure.tokens >= truth, (
        f"admitted at {figure.tokens} ({figure.method}) but the engine prefills {truth} tokens"
        + (f"; threshold {LONG_AT}: routed local though long" if figure.tokens <= LONG_AT < truth else "")
    )


# ---- 1. named templates: the request's tools pick "tool_use" ------------------------------------------------
@pytest.mark.parametrize("layout", ["tokenizer_config list", "additional_chat_templates"])
def test_tools_pick_the_tool_use_template(model_folder: Path, tmp_path: Path, layout: str) -> None:
    """Class: the template the engine renders depends on the request (transformers' ``get_chat_template``: a folder
    with named templates renders ``tool_use`` whenever ``tools`` is given, vLLM's ``resolve_chat_template`` calls it
    with the request's tools), while servelab compiles one template at load, always ``default``.

    Where: src/servelab/gateway/admission/counter.py:292-300 (``_template_source``: ``chat_template.jinja``, else the
    list's ``default``; ``additional_chat_templates/`` never read) and :68 (one ``ChatTemplate`` per folder, picked
    at load). Real folders ship exactly this layout (e.g. Hermes-2-Pro: ``default`` and ``tool_use`` in
    tokenizer_config.json).

    Input: a chat with one tool whose description is ~9,000 tokens. Expected: a figure >= the engine's ~9,000
    (long: external). Observed: the default template's few dozen tokens (``bound``): admitted to the local engine."""
    folder = _folder(tmp_path, model_folder, "named")
    default = (folder / "chat_template.jinja").read_text()
    if layout == "tokenizer_config list":
        (folder / "chat_template.jinja").unlink()
        _edit_config(folder, chat_template=[{"name": "default", "template": default},
                                            {"name": "tool_use", "template": TOOLS_TEMPLATE}])  # fmt: skip
    else:
        (folder / "additional_chat_templates").mkdir()
        (folder / "additional_chat_templates" / "tool_use.jinja").write_text(TOOLS_TEMPLATE)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "lookup", "description": "word " * 9000}}]}  # fmt: skip
    truth = _engine_chat(folder, body)
    assert truth > LONG_AT  # the engine prefills a long prompt
    _assert_not_below(_figure(folder, CHAT, body), truth)


# ---- 2. tools as the engine's model dumps them ----------------------------------------------------------------
def test_a_tools_defer_loading_is_rendered_twice_by_the_engine(model_folder: Path, tmp_path: Path) -> None:
    """Class: tools reach the template as vLLM's pydantic model re-serializes them (validators run, values coerced),
    not as the client sent them. ``ChatCompletionToolsParam._propagate_defer_loading`` copies a tool's
    ``defer_loading`` into ``function.defer_loading``, so every tool prints ``"defer_loading": true`` twice; servelab
    prints it once.

    Where: src/servelab/gateway/admission/counter.py:211-222 (``_tools``: a hand-written copy of ``model_dump`` that
    fills ``description``/``parameters`` but runs none of the model's validators or coercions).

    Input: 225 tools ``{"type": "function", "defer_loading": true, "function": {"name": "f"}}`` on a template that
    prints ``tool | tojson`` (the review's tools.jinja). Expected: >= the engine's count (over 8,000). Observed: ~15%
    below it, under the threshold: a long prompt admitted locally."""
    folder = _folder(tmp_path, model_folder, "tools")
    (folder / "chat_template.jinja").write_text(TOOLS_TEMPLATE)
    tools = [{"type": "function", "defer_loading": True, "function": {"name": "f"}} for _ in range(225)]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    truth = _engine_chat(folder, body)
    assert truth > LONG_AT
    _assert_not_below(_figure(folder, CHAT, body), truth)


def test_request_flags_reach_the_template_as_the_engine_validated_them(model_folder: Path, tmp_path: Path) -> None:
    """Class 2 beyond tools (fields as the engine's model validated them): ``"add_generation_prompt": 1`` is the
    boolean ``True`` to vLLM (pydantic's lax bool), but servelab hands the template the client's ``1``, which a
    template's ``is true`` test (identity with True) rejects: the engine renders the generation prompt, servelab's
    count leaves it out. Where: src/servelab/gateway/admission/counter.py:199-208 (``_context``: the raw
    ``body.get("add_generation_prompt", True)``; likewise ``continue_final_message``). Input: one message of 600 "hi "
    (over the 1,024-byte bound, so rendered: the affine bound takes every branch and would cover it). Expected: >=
    the engine's 610. Observed: 606 (the generation prompt left out)."""
    folder = _folder(tmp_path, model_folder, "flag")
    (folder / "chat_template.jinja").write_text(
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt is true %}<|im_start|>assistant\n{% endif %}"
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hi " * 600}], "add_generation_prompt": 1}
    _assert_not_below(_figure(folder, CHAT, body), _engine_chat(folder, body))


# ---- 3. the engine's vocabulary: tokenizer.json plus tokenizer_config.json ------------------------------------
@pytest.mark.parametrize("how", ["added_tokens_decoder", "a *_token key"])
def test_tokens_tokenizer_config_adds_split_the_text(model_folder: Path, tmp_path: Path, how: str) -> None:
    """Class: the engine's tokenizer is not tokenizer.json alone. transformers' AutoTokenizer (what vLLM loads) adds
    every ``added_tokens_decoder`` entry of tokenizer_config.json, and every ``*_token`` key (v5's model-specific
    special tokens), to the vocabulary; an added token splits the text around it, so the same prompt makes more
    tokens in the engine. servelab's exact count uses ``tokenizers.Tokenizer.from_file("tokenizer.json")``.

    Where: src/servelab/gateway/admission/counter.py:68 (``Tokenizer.from_file`` of tokenizer.json only; the only
    cross-check, ``_special_tokens`` :279-289, compares the seven named special tokens, not the vocabularies).

    Input: /v1/completions, prompt ``"hello world, " * 2000`` (26 kB: counted exactly), the folder adding ``ell``.
    Expected: >= the engine's 10,001 tokens (long). Observed: 6,001 (``exact``): admitted locally."""
    folder = _folder(tmp_path, model_folder, "vocab")
    if how == "added_tokens_decoder":
        token = {"content": "ell", "lstrip": False, "rstrip": False, "normalized": False, "single_word": False,
                 "special": False}  # fmt: skip
        _edit_config(folder, added_tokens_decoder={"49152": token})
    else:
        _edit_config(folder, marker_token="ell")
    body = {"model": "m", "prompt": "hello world, " * 2000}
    truth = _engine_completion(folder, body)
    assert truth > LONG_AT
    _assert_not_below(_figure(folder, COMPLETIONS, body), truth)


def test_a_chat_is_tokenized_with_the_engines_vocabulary(model_folder: Path, tmp_path: Path) -> None:
    """Class 3 on the chat endpoint (the same exact count, ``_exact`` :157): the rendered chat tokenized with
    tokenizer.json alone. Input: one user message ``"hello world, " * 2000``; the folder's tokenizer_config.json
    adds ``ell`` in ``added_tokens_decoder``."""
    folder = _folder(tmp_path, model_folder, "vocab_chat")
    token = {"content": "ell", "lstrip": False, "rstrip": False, "normalized": False, "single_word": False,
             "special": False}  # fmt: skip
    _edit_config(folder, added_tokens_decoder={"49152": token})
    body = {"model": "m", "messages": [{"role": "user", "content": "hello world, " * 2000}]}
    truth = _engine_chat(folder, body)
    assert truth > LONG_AT
    _assert_not_below(_figure(folder, CHAT, body), truth)


# ---- 4. the template's special-token variables -----------------------------------------------------------------
def test_a_model_specific_special_token_reaches_the_template(model_folder: Path, tmp_path: Path) -> None:
    """Class: the template's context holds every special token the engine's tokenizer names. transformers v5 takes
    any ``*_token`` key of tokenizer_config.json as a model-specific special token and passes it to the template
    (``special_tokens_map``); servelab hands the template only the seven standard names, so the name renders as ""
    in its count (the render path) and as the token in the engine's.

    Where: src/servelab/gateway/admission/counter.py:32 (``SPECIAL_NAMES``) and :279-289 (``_special_tokens``).

    Input: a template printing ``{{ turn_token }}`` in each message (tokenizer_config.json ``"turn_token":
    "<|turn|>"``), 2,000 messages "hi". Expected: >= the engine's count (each message one token more).
    Observed: 2,000 tokens below it."""
    folder = _folder(tmp_path, model_folder, "named_token")
    _edit_config(folder, turn_token="<|turn|>")
    (folder / "chat_template.jinja").write_text(
        "{% for message in messages %}{{ turn_token }}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 2000}
    _assert_not_below(_figure(folder, CHAT, body), _engine_chat(folder, body))


# ---- 5. strftime_now: widest in characters is not widest in tokens -------------------------------------------
def test_strftime_now_on_another_day_makes_more_tokens(
    model_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class: a template's ``strftime_now`` is rendered at one fixed date (2023-09-27 23:59:59, "the longest names"),
    but the engine renders at its own moment, and the count made is an exact count of that one text, not a bound
    of another day's: ``%-m`` is "9" (1 token) in September and "12" (2 tokens) from October to December; ``%a``
    "Wed" is 1 token, "Tue" 2; ``%c`` likewise.

    Where: src/servelab/gateway/admission/template.py:31-37 (``WIDEST``/``_now``).

    Input: a template printing ``strftime_now('%-m')`` in each of 3,000 messages, the engine's clock on
    2026-12-06 (the day this was written). Expected: >= the engine's count. Observed: 3,000 tokens below it."""
    import transformers.utils.chat_template_utils as chat_template_utils

    class December(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime(2026, 12, 6, 3, 38, 47)

    monkeypatch.setattr(chat_template_utils, "datetime", December)
    folder = _folder(tmp_path, model_folder, "clock")
    (folder / "chat_template.jinja").write_text(
        "{% for message in messages %}<|im_start|>{{ message['role'] }} {{ strftime_now('%-m') }}\n"
        "{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}"
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 3000}
    _assert_not_below(_figure(folder, CHAT, body), _engine_chat(folder, body))
