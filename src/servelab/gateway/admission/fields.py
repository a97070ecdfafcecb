"""Which request fields the count may leave aside, by construction an allow-list.

Rule: a request is counted only when every top-level field it carries is either one the counter reads (the prompt,
the messages and what the template is handed) or one known to act after the prompt is built (sampling, stopping,
output format, bookkeeping). Any other field — one that may replace or extend the prompt (``kv_transfer_params``,
``mm_payload``, ``prompt_embeds``, ``chat_template``, a field servelab has never heard of) — makes the request
uncountable, so it is long. ``chat_template_kwargs`` are template variables only: a key the template reads is
rendered; a key that names a parameter of the tokenizer call or a field the request itself sets (``tokenize``,
``padding``, ``max_length``, ``tokenizer_kwargs``, ``add_generation_prompt``, ``tools``, ...) is uncountable; any
other key is one the engine drops. A request field the template reads only by name (``reasoning_effort``) is
uncountable when the template reads it."""

from __future__ import annotations

from typing import Any

from servelab.gateway.admission.errors import Uncountable

AFTER_THE_PROMPT = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "stop_token_ids",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "length_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "prompt_logprobs",
        "ignore_eos",
        "min_tokens",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "priority",
        "request_id",
        "structured_outputs",
        "allowed_token_ids",
        "bad_words",
        "include_reasoning",
        "return_token_ids",
        "return_tokens_as_token_ids",
        "return_token_offsets",
        "return_prompt_text",
        "logprob_token_ids",
        "stream_interval",
        "cache_salt",
        "session_id",
        "thinking_token_budget",
        "repetition_detection",
        "truncate_prompt_tokens",
        "truncation_side",
        "metadata",
        "store",
        "service_tier",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "guided_decoding_backend",
    }
)
CHAT_READ = frozenset(
    {
        "messages",
        "tools",
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "documents",
        "n",
        "response_format",
        "add_special_tokens",
        "reasoning_effort",
        "echo",
    }
)
COMPLETIONS_READ = frozenset({"prompt", "suffix", "n", "best_of", "echo", "add_special_tokens", "response_format"})
TOKENIZER_CALL = frozenset(
    {
        "messages",
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
        "processor_kwargs",
        "padding_side",
        "pad_to_multiple_of",
        "text_pair",
        "add_special_tokens",
        "is_split_into_words",
        "stride",
        "verbose",
    }
)
CHAT_ALLOWED, COMPLETIONS_ALLOWED = CHAT_READ | AFTER_THE_PROMPT, COMPLETIONS_READ | AFTER_THE_PROMPT
BY_NAME = ("reasoning_effort",)  # request fields the engine hands the template under their own name


def check_fields(chat: bool, body: dict[str, Any], template_vars: frozenset[str] | None) -> dict[str, Any]:
    """The template kwargs to render with (``template_vars``: the variables the template reads; None: the engine
    renders, so the kwargs go to it as they are). :class:`Uncountable` where a field may change the prompt in a
    way the count does not model."""
    allowed = CHAT_ALLOWED if chat else COMPLETIONS_ALLOWED
    if not body.keys() <= allowed:
        unknown = next(key for key in body if key not in allowed)
        raise Uncountable(f"the field {str(unknown)[:40]!r} may change the prompt and is not counted")
    if not chat:
        return {}
    for name in BY_NAME:
        if body.get(name) is not None and (template_vars is None or name in template_vars or "enable_thinking"
                                           in template_vars):  # fmt: skip
            raise Uncountable(f"{name} is rendered by this model's template and is not counted")
    return template_kwargs(body.get("chat_template_kwargs"), template_vars)


def template_kwargs(kwargs: Any, template_vars: frozenset[str] | None) -> dict[str, Any]:
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise Uncountable("chat_template_kwargs is not an object")
    reserved = [key for key in kwargs if key in TOKENIZER_CALL or str(key).startswith("return_")]
    if reserved:
        raise Uncountable(f"chat_template_kwargs.{str(reserved[0])[:40]} changes how the prompt is made")
    if template_vars is None:
        return dict(kwargs)
    return {key: value for key, value in kwargs.items() if key in template_vars}
