"""A continued final message (``continue_final_message``), rendered as transformers renders it for vLLM.

Rule (transformers' ``render_jinja_template``, which vLLM's renderer calls): the flag is the renderer's own
parameter, never a template variable; the tag ``CONTINUE_FINAL_MESSAGE_TAG `` is appended to the final message's
content (to its last part that has text, in the "openai" content format); the chat is rendered; the text is cut
just before the tag's last occurrence (and the whitespace before it too, where the template trimmed the space
after the tag). Every earlier copy of the final message keeps the tag. Where transformers refuses (a final
message without content or without a text part, a template that never names ``content``, a render that lost the
message or the tag), the engine answers 400: :class:`Uncountable`."""

from __future__ import annotations

from typing import Any

from servelab.gateway.admission.errors import Uncountable
from servelab.gateway.admission.template import Rendered

TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def tagged(messages: list[dict[str, Any]], source: str) -> tuple[list[dict[str, Any]], str]:
    """The conversation with the tag on its final message, and that message's text before it (copies: the
    conversation given is left as it was)."""
    if "content" not in source:
        raise Uncountable("continue_final_message with a template that never names content (the engine answers 400)")
    if not messages or messages[-1].get("content") is None:
        raise Uncountable("continue_final_message without a final message's content (the engine answers 400)")
    final = dict(messages[-1])
    content = final["content"]
    if isinstance(content, list):
        parts = [dict(p) if isinstance(p, dict) else p for p in content]
        texts = [p for p in parts if isinstance(p, dict) and "text" in p]
        if not texts or not isinstance(texts[-1]["text"], str):
            raise Uncountable("continue_final_message without a text part to continue (the engine answers 400)")
        text = texts[-1]["text"]
        texts[-1]["text"] = text + TAG
        final["content"] = parts
    elif isinstance(content, str):
        text, final["content"] = content, content + TAG
    else:
        raise Uncountable("continue_final_message on content that is not text")
    return [*messages[:-1], final], text


def cut(rendered: Rendered, final: str) -> list[Rendered]:
    """The render as the engine keeps it: up to the tag's last occurrence. Which of transformers' two cuts applies
    depends on the character after the tag; where a ``strftime_now`` output prints it, that differs by date, and
    both cuts are given (the larger count is kept)."""
    text = rendered.text
    if final.strip() not in text or TAG.strip() not in text:
        raise Uncountable("the template dropped the continued message (the engine answers 400)")
    at = text.rindex(TAG.strip())
    after = at + len(TAG) - 1  # the character that decides: the tag's own space, or what the template put there
    dated = any(span.start <= after < span.end for span in rendered.clock)
    keeps = (
        [text[:at], text[:at].rstrip()]
        if dated
        else [text[:at] if text[at : at + len(TAG)] == TAG else text[:at].rstrip()]
    )
    return [_kept(rendered, kept) for kept in keeps]


def _kept(rendered: Rendered, kept: str) -> Rendered:
    if any(span.start < len(kept) < span.end for span in rendered.clock):
        raise Uncountable("the continued message is cut inside a strftime_now output")
    return Rendered(kept, tuple(span for span in rendered.clock if span.end <= len(kept)))
