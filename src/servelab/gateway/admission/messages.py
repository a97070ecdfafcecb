"""A chat request's messages as the engine hands them to its template (vLLM's conversion, read in its
``renderers/chat_utils.py``): string content as one text part; text-like parts (``text``, ``input_text``,
``output_text``, ``refusal``, ``thinking``) kept, joined with a newline in the "string" content format, kept as
``{"type": "text", ...}`` dicts (with their other fields) in the "openai" format; ``tool_reference`` by its name;
assistant ``tool_calls`` with their JSON arguments parsed, ``reasoning`` (and ``reasoning_content``), ``name``,
``tool_call_id``, ``task``; a ``developer`` message becomes ``system`` when the template has no developer role.

Rule: anything whose tokens servelab cannot know (a media part, an embedding, a part of a type or shape the engine
would not take as text) raises :class:`Uncountable`, so the request is long; nothing is dropped to make a count.
Where servelab is unsure whether the engine renders a field, it keeps it (a larger count is safe)."""

from __future__ import annotations

from typing import Any

import orjson

from servelab.gateway.admission.errors import Uncountable
from servelab.gateway.admission.numbers import loads_exact

BILLING_HEADER = "x-anthropic-billing-header"  # Claude Code's attribution line, dropped from system text by vLLM
# the keys vLLM knows on a content part (renderers/chat_utils.py, _KNOWN_CONTENT_PART_FIELDS): any other key of a text
# part reaches the template after "type" and "text", these never do
KNOWN_PART_KEYS = frozenset({"audio_embeds", "audio_url", "closed", "data", "file", "image_embeds", "image_pil",
                             "image_url", "input_audio", "name", "prompt_cache_breakpoint", "refusal", "text",
                             "thinking", "type", "uuid", "video_embeds", "video_url"})  # fmt: skip
TEXT_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
SKIPPED_WHEN_NONE = ("text", "refusal")
# keys by which vLLM takes a part as media whatever its type says (a part with a uuid is classed by its keys)
MEDIA_KEYS = frozenset({"image_url", "image_pil", "image_embeds", "audio_embeds", "video_embeds", "prompt_embeds",
                        "audio_url", "input_audio", "video_url", "file", "input_image", "image"})  # fmt: skip


def conversation(
    messages: Any, openai_format: bool, developer_role: bool, reasoning_content: bool = False
) -> list[dict[str, Any]]:
    """The messages the template sees, with exactly the keys vLLM sets (a key set to None included: a template's
    ``is defined`` test sees it); :class:`Uncountable` where a message cannot be taken as text. ``reasoning_content``:
    the variant of an engine that reads an assistant's ``reasoning_content`` where ``reasoning`` is not given (the
    caller counts both variants when a message carries it)."""
    if not isinstance(messages, list):
        raise Uncountable("messages is not a list")
    out = [_message(m, openai_format, developer_role, reasoning_content) for m in messages]
    if not developer_role and any(isinstance(m, dict) and m.get("role") == "developer" for m in messages):
        out = _consolidated(out)
    return out


def _consolidated(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's step after a developer message became a system one (renderers/hf.py, _consolidate_system_messages):
    where a system message is not first, or there are several, every system message's text (a list's text parts
    joined by a newline) is merged, by a blank line, into one system message put first."""
    texts: list[str] = []
    rest: list[dict[str, Any]] = []
    merge = False
    for i, message in enumerate(messages):
        if message["role"] != "system":
            rest.append(message)
            continue
        merge = merge or i > 0 or bool(texts)
        content = message.get("content", "")
        if isinstance(content, list):
            parts = [p["text"] if isinstance(p, dict) else p for p in content
                     if (isinstance(p, dict) and "text" in p) or isinstance(p, str)]  # fmt: skip
            if not all(isinstance(p, str) for p in parts):
                raise Uncountable("a system message's text part is not a string")
            content = "\n".join(parts)
        if content:
            texts.append(content)
    return [{"role": "system", "content": "\n\n".join(texts)}, *rest] if merge else messages


def has_reasoning_content(messages: Any) -> bool:
    return isinstance(messages, list) and any(isinstance(m, dict) and "reasoning_content" in m for m in messages)


def _message(message: Any, openai_format: bool, developer_role: bool, reasoning_content: bool) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise Uncountable("a message is not an object with a string role")
    role: str = message["role"]
    if role == "developer" and not developer_role:
        role = "system"
    content = message.get("content")
    if message["role"] == "system":  # as sent: a developer message turned system later is not stripped
        content = _without_billing_header(content)
    out: dict[str, Any] = {"role": role, "content": _content(content, openai_format, role)}
    if role == "assistant":
        _assistant(message, out, reasoning_content)
    elif role == "tool" and "tool_call_id" in message:  # whatever its value, None included
        out["tool_call_id"] = message["tool_call_id"]
    for key in ("name", "task"):
        if isinstance(message.get(key), str):
            out[key] = message[key]
    if role == "developer":
        out["tools"] = message.get("tools")
    return out


def _without_billing_header(content: Any) -> Any:
    """vLLM's ``_strip_claude_code_billing_header`` on a system message: a text starting with the header loses its
    first line, and the part goes where nothing follows (a template may branch on the text left)."""
    parts = [content] if isinstance(content, str) else content
    if not isinstance(parts, list):
        return content
    out: list[Any] = []
    for part in parts:
        text = part if isinstance(part, str) else part.get("text") if isinstance(part, dict) and part.get(
            "type") == "text" else None  # fmt: skip
        if not (isinstance(text, str) and text.startswith(BILLING_HEADER)):
            out.append(part)
        elif rest := text.partition("\n")[2]:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return content if out == parts and isinstance(content, str) else out


def _assistant(message: dict[str, Any], out: dict[str, Any], reasoning_content: bool) -> None:
    """An assistant's tool calls (an empty list dropped) and its reasoning, set under both names."""
    calls = message.get("tool_calls")
    if calls is not None and calls != []:
        out["tool_calls"] = _tool_calls(calls)
    reasoning = message.get("reasoning")
    if reasoning is None and reasoning_content:
        reasoning = message.get("reasoning_content")
    if reasoning is not None:
        out["reasoning"] = out["reasoning_content"] = _text(reasoning)


def _content(content: Any, openai_format: bool, role: str) -> Any:
    """A message's content as the template sees it: one string in the "string" format (its text parts joined with a
    newline), the parts in the "openai" format (a tool result all of text parts: one string, as vLLM gives it)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if openai_format and role != "tool" else content
    parts = _parts(content)
    if not openai_format or (role == "tool" and all(p.get("type") == "text" for p in parts)):
        return "\n".join(_texts(parts))
    return parts


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise Uncountable("a message's content is neither a string nor a list of parts")
    return [p for p in (_part(part) for part in content) if p is not None]


def _part(part: Any) -> dict[str, Any] | None:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        raise Uncountable("a content part is neither a string nor an object")
    kind = part.get("type")
    if not isinstance(kind, str) or "uuid" in part:
        raise Uncountable("a content part whose type is not a string, or with a uuid: the engine reads its keys")
    if media := MEDIA_KEYS.intersection(part):
        raise Uncountable(f"a content part with {sorted(media)[0]!r} (media): its tokens are not known")
    if kind == "tool_reference":
        return {"type": "tool_reference", "name": _text(part.get("name"))}
    if kind not in TEXT_KEYS:
        raise Uncountable(f"a content part of type {str(kind)[:40]!r} (media or unknown): its tokens are not known")
    value = part.get(TEXT_KEYS[kind])
    if value is None and kind in SKIPPED_WHEN_NONE:
        return None
    extra = {k: v for k, v in part.items() if k not in KNOWN_PART_KEYS}
    return {"type": "text", "text": _text(value), **extra}  # vLLM's order: its two keys, then the others as sent


def _texts(parts: list[dict[str, Any]]) -> list[str]:
    return [str(p.get("text", p.get("name", ""))) for p in parts]


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise Uncountable("a text field holds something other than a string")
    return value


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    """Assistant tool calls with their arguments as objects and their keys in the engine's order (how templates
    are handed them)."""
    if not isinstance(calls, list):
        raise Uncountable("tool_calls is not a list")
    out: list[dict[str, Any]] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise Uncountable("a tool call has no function object")
        function = _declared({**function, "arguments": _arguments(function.get("arguments"))}, FUNCTION_KEYS)
        out.append(_declared({**call, "function": function}, TOOL_CALL_KEYS))
    return out


TOOL_CALL_KEYS, FUNCTION_KEYS = ("id", "function", "type"), ("arguments", "name")  # vLLM's TypedDicts' order


def _arguments(given: Any) -> dict[str, Any]:
    """A call's arguments as vLLM hands them to the template (``_postprocess_messages``): an object as it is; a
    string decoded; anything empty, undecodable or that is not an object decoded as ``{}``."""
    if not given:
        return {}
    parsed = given
    if isinstance(given, str):
        try:
            parsed = loads_exact(given)
        except orjson.JSONDecodeError:
            return {}
    return parsed if isinstance(parsed, dict) else {}


def _declared(item: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``item`` with its keys as vLLM's request validation rebuilds them: the declared ones in declaration order,
    then the others as sent (a template's ``tojson`` prints them in that order)."""
    return {**{k: item[k] for k in keys if k in item}, **{k: v for k, v in item.items() if k not in keys}}
