"""Session 27's attack on the admission: inputs whose figure falls below the engine's own count of the prompt it
prefills (the truth: tests/fixtures/vllm_truth.py, vLLM 0.32's request validation and message conversion, then
transformers' apply_chat_template as vLLM calls it). Each test failed on the code it was written against (979b495)
and holds since: continue_final_message is the renderer's (tagged and cut as transformers does, never a template
variable: gateway/admission/continuation.py), tool calls keep vLLM's key order, ``{% generation %}`` is a caller
macro, and an engine started with ``--chat-template-content-format openai`` is counted in that format once the
gateway is told (``[local] chat_template_content_format``).

Classes (each new; none repeats s26/s26b):
1. The template's context is not the engine's: transformers' ``render_jinja_template`` *consumes*
   ``continue_final_message`` (it is a parameter of the renderer, never handed to the template), while the count
   hands the template ``continue_final_message`` as a boolean (request.py:context / FLAGS). A template that reads
   the name sees True/False in the count and Undefined in the engine.
2. ``continue_final_message`` rewrites the conversation before the render: transformers appends the tag
   ``"CONTINUE_FINAL_MESSAGE_TAG "`` to the final message's content (or its last text part), renders, and cuts the
   text at the LAST occurrence of the tag. Every earlier copy of the final message's text keeps the tag (27
   characters) in the engine's prompt; the count renders the unmodified conversation.
3. Messages are re-serialized by vLLM's pydantic validation (TypedDicts: keys rebuilt in declaration order, unknown
   keys dropped) before the template sees them: an assistant tool call ``{"id", "type", "function": {"name",
   "arguments"}}`` reaches the template as ``{"id", "function": {"arguments", "name"}, "type"}``. The count keeps
   the client's key order, so ``tool_calls|tojson`` prints the same characters in another order, which the
   tokenizer splits into more tokens (messages.py:_tool_calls copies ``{**call}`` as sent).
4. ``{% generation %}`` is compiled by transformers as a CallBlock (a caller macro), by the count as a plain Scope
   (template.py:_generation_extension): inside it ``kwargs``/``varargs`` are the macro's ``{}``/``()`` in the engine
   and undefined ("") in the count."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from servelab.gateway.admission import CHAT, TokenCounter
from servelab.gateway.estimate import Admission
from tests.fixtures.vllm_truth import engine_count
from tests.unit.gateway.model_folders import LONG_AT, LONG_FIGURE, copy_folder, figure
from tests.unit.gateway.model_folders import assert_not_below as _assert_not_below
from tests.unit.gateway.model_folders import never as _never


def _engine_chat(folder: Path, body: dict[str, Any]) -> int:
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return engine_count(folder, json.loads(json.dumps(body)), tokenizer)


def _figure(folder: Path, body: dict[str, Any], content_format: str = "auto") -> Any:
    return figure(TokenCounter.from_folder(folder, content_format), body)


def _folder(tmp_path: Path, model_folder: Path, name: str, template: str) -> Path:
    folder = copy_folder(tmp_path, model_folder, name)
    (folder / "chat_template.jinja").write_text(template)
    return folder


# ---- 1. continue_final_message is not a template variable in the engine ----------------------------------------
PREAMBLE = ("{% if not continue_final_message %}" + "You are a careful assistant. " * 400 + "{% endif %}"
            "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")  # fmt: skip


def test_continue_final_message_is_not_handed_to_the_template(model_folder: Path, tmp_path: Path) -> None:
    """Where: request.py:context (``out[name] = _bool(...)`` for both FLAGS). transformers' render_jinja_template takes
    ``continue_final_message`` as its own parameter and renders with ``messages, tools, documents,
    add_generation_prompt, **kwargs`` only, so the engine's template reads Undefined (falsy) there. Input: a
    template whose preamble is printed ``if not continue_final_message``; a request continuing an assistant message.
    Expected: >= the engine's ~2,400 tokens. Observed: the preamble left out (~2,390 tokens below)."""
    folder = _folder(tmp_path, model_folder, "cfm_var", PREAMBLE)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi " * 400},
                                       {"role": "assistant", "content": "Sure"}],
            "continue_final_message": True, "add_generation_prompt": False}  # fmt: skip
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))


# ---- 2. the continue tag stays in every earlier copy of the final message -------------------------------------
RECAP = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
         "{% endfor %}<|im_start|>recap\n{{ messages[-1]['content'] }}")  # fmt: skip


def test_the_continue_tag_is_prefilled_where_the_final_message_repeats(model_folder: Path, tmp_path: Path) -> None:
    """Where: counter.py:_renders (the conversation as sent; transformers' render_jinja_template appends
    ``"CONTINUE_FINAL_MESSAGE_TAG "`` to ``chat[-1]["content"]`` and cuts at the tag's LAST occurrence). Input: a
    template that prints the final message twice (in its turn and as a recap), 1,200 characters of user text.
    Expected: >= the engine's count. Observed: the engine's prompt holds the literal tag once (+~7 tokens) and the
    count's render is cut nowhere but has only ``\\n<|im_end|>``-sized text after it: below."""
    folder = _folder(tmp_path, model_folder, "cfm_tag", RECAP)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi " * 400}, {"role": "assistant", "content": "x"}],
            "continue_final_message": True, "add_generation_prompt": False}  # fmt: skip
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))


# ---- 3. tool calls reach the template in the engine's key order ------------------------------------------------
MISTRAL_LIKE = ("{%- for message in messages %}{%- if message.role == 'user' %}[INST] {{ message.content }}[/INST]"
                "{%- elif message.role == 'assistant' %}{%- if message.tool_calls %}[TOOL_CALLS]"
                "{{ message.tool_calls|tojson }}{%- else %}{{ message.content }}{%- endif %}</s>{%- endif %}"
                "{%- endfor %}")  # fmt: skip


def test_tool_calls_are_printed_in_the_engines_key_order(model_folder: Path, tmp_path: Path) -> None:
    """Where: messages.py:_tool_calls (``{**call, "function": {**function, ...}}``: the client's order). vLLM
    validates each message against its TypedDicts and rebuilds the call as ``{"id", "function": {"arguments",
    "name"}, "type"}``. Input: 500 assistant turns, each one tool call ``{"type": "function", "id": "}", "function":
    {"name": "", "arguments": "{\\"a\\": 1}"}}``. Expected: >= the engine's 20,000 tokens. Observed: 19,500."""
    folder = _folder(tmp_path, model_folder, "order", MISTRAL_LIKE)
    call = {"type": "function", "id": "}", "function": {"name": "", "arguments": '{"a": 1}'}}
    body = {"model": "m", "messages": [{"role": "assistant", "tool_calls": [call]}] * 500}
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))


# ---- 4. {% generation %} is a caller macro in the engine --------------------------------------------------------
GENERATION = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% generation %}"
              "{{ message['content'] }}{{ kwargs }}{{ varargs }}{% endgeneration %}"
              "<|im_end|>\n{% endfor %}")  # fmt: skip


def test_generation_blocks_render_as_the_engines_caller_macro(model_folder: Path, tmp_path: Path) -> None:
    """Where: template.py:_generation_extension (``nodes.Scope``; transformers compiles ``CallBlock`` whose body is
    a macro with ``kwargs`` = {} and ``varargs`` = ()). Input: 3,000 messages "hi". Expected: >= the engine's count
    ("{}()" per message). Observed: thousands of tokens below."""
    folder = _folder(tmp_path, model_folder, "generation", GENERATION)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 3000}
    _assert_not_below(_figure(folder, body), _engine_chat(folder, body))


# ---- 5. a content format the server forces (--chat-template-content-format openai) ------------------------------
LLAMA3_LIKE = ("{{ bos_token }}{% for message in messages %}{% set content = '<|im_start|>' + message['role'] + "
               "'\n\n' + message['content'] | trim + '<|im_end|>' %}{{ content }}{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n\n{% endif %}")  # fmt: skip


def _engine_chat_openai_format(folder: Path, body: dict[str, Any]) -> int:
    """vllm_truth.engine_count with the content format an engine started with ``--chat-template-content-format
    openai`` uses for every template (vLLM's ``resolve_chat_template_content_format``: a given format wins over
    detection)."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers import chat_utils, hf

    from tests.fixtures import vllm_truth

    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    request = ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))
    template = tok.get_chat_template(None, tools=None)
    conversation: list[Any] = []
    for message in request.messages:
        conversation.extend(chat_utils._parse_chat_message_content(message, vllm_truth._Tracker(), "openai", False))
    chat_utils._postprocess_messages(conversation)
    kwargs = dict(request.build_chat_params(None, "openai").get_apply_chat_template_kwargs())
    kwargs.pop("chat_template", None)
    kwargs.pop("return_dict", None)
    resolved = hf.resolve_chat_template_kwargs(tok, template, kwargs)
    text = tok.apply_chat_template(conversation=conversation, tools=None, chat_template=template, tokenize=False,
                                   **resolved)  # fmt: skip
    return len(tok(text, add_special_tokens=False)["input_ids"])


def test_a_server_forced_openai_content_format_is_counted(model_folder: Path, tmp_path: Path) -> None:
    """Where: counter.py:_renders (``formats = (False, True) if template.may_iterate_content else (False,)``): a
    template that never loops over a message's parts is rendered in the "string" format only, but an engine started
    with ``--chat-template-content-format openai`` hands every template the parts list, which ``| trim`` (or a plain
    ``{{ message['content'] }}``) prints as its Python repr ``[{'type': 'text', 'text': '...'}]``. The gateway models
    one such server flag (``--exclude-tools-when-tool-choice-none``) and not this one. Input: 2,000 messages "hi".
    Expected: >= the engine's count. Observed: ~20,000 tokens below (10 per message)."""
    folder = _folder(tmp_path, model_folder, "openai_format", LLAMA3_LIKE)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 2000}
    figure, truth = _figure(folder, body, "openai"), _engine_chat_openai_format(folder, body)
    _assert_not_below(figure, truth)
    assert figure.method == "exact" and figure.tokens == truth  # that format alone, exactly


# ---- 6. the same class: the engine's --chat-template replaces the folder's ---------------------------------------
def test_the_engines_own_chat_template_is_counted_once_declared(model_folder: Path, tmp_path: Path) -> None:
    """An engine started with ``--chat-template FILE`` renders every request (tools or not) with FILE, not the
    folder's templates. Declared (``[local] chat_template``), the count renders FILE alone; the truth is the engine's
    count with FILE in its folder."""
    import asyncio as _asyncio

    from servelab.gateway.config import Upstream
    from servelab.gateway.tokenizer import load_counter

    served = tmp_path / "served.jinja"
    served.write_text(RECAP)  # prints the final message twice: more than the folder's own template
    folder = copy_folder(tmp_path, model_folder, "plain")
    truth_folder = _folder(tmp_path, model_folder, "as_served", RECAP)
    turns = [{"role": "user", "content": "hi " * 300}, {"role": "user", "content": "yo " * 300}]
    body = {"model": "m", "messages": turns, "tools": [{"type": "function", "function": {"name": "f"}}]}
    counter, settled = _asyncio.run(
        load_counter(Upstream(url="http://127.0.0.1:9", tokenizer=str(folder), chat_template=str(served)), None)
    )  # type: ignore[arg-type]
    assert settled and counter is not None and counter.templates is not None
    assert (
        [t.source for t in counter.templates.pick(True)] == [RECAP] == [t.source for t in counter.templates.pick(False)]
    )
    raw = json.dumps(body).encode()
    figure = _asyncio.run(Admission(counter, _never, LONG_FIGURE, 0, LONG_AT).figure(CHAT, orjson.loads(raw), raw))
    assert figure.method == "exact" and figure.tokens == _engine_chat(truth_folder, body)


# ---- 7. the same class: the engine's --default-chat-template-kwargs -------------------------------------------
THINKING = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
            "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")  # fmt: skip


def test_the_engines_default_template_kwargs_are_counted_beneath_the_requests(
    model_folder: Path, tmp_path: Path
) -> None:
    """``--default-chat-template-kwargs '{"enable_thinking": false}'`` (Qwen3 served without thinking): the template
    prints an empty think block the folder alone never shows. Declared (``[local] default_chat_template_kwargs``),
    it is a kwarg beneath the request's own, as vLLM merges them; the truth is the engine's count of the request with
    that kwarg given."""
    folder = _folder(tmp_path, model_folder, "thinking", THINKING)
    counter = TokenCounter.from_folder(folder, default_kwargs={"enable_thinking": False})
    plain = {"model": "m", "messages": [{"role": "user", "content": "hi " * 50}]}
    overriding = {**plain, "chat_template_kwargs": {"enable_thinking": True}}
    for body, as_engine in ((plain, {**plain, "chat_template_kwargs": {"enable_thinking": False}}),
                            (overriding, overriding)):  # fmt: skip
        raw = json.dumps(body).encode()
        figure = asyncio.run(Admission(counter, _never, LONG_FIGURE, 0, LONG_AT).figure(CHAT, orjson.loads(raw), raw))
        assert figure.method == "exact" and figure.tokens == _engine_chat(folder, as_engine), body
    with pytest.raises(Exception, match="changes how the prompt is made"):
        TokenCounter.from_folder(folder, default_kwargs={"add_generation_prompt": False})
