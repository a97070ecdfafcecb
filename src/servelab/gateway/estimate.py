"""Prompt tokens in tiers: a byte-length estimate where it is far from the threshold, an exact count (the
local engine's /tokenize) near it; the method is recorded with the figure."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

BYTES_PER_TOKEN = 4.0  # English and code, roughly; only used far from the threshold


@dataclass(frozen=True)
class Estimate:
    tokens: int
    method: str  # "bytes" or "tokenize" (or "bytes-fallback" when the exact count failed)


def prompt_text(body: dict[str, Any]) -> str:
    """The text that becomes prompt tokens: message contents (text parts), tool definitions, or the prompt."""
    if "messages" in body and isinstance(body["messages"], list):
        parts: list[str] = []
        for message in body["messages"]:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
            if message.get("tool_calls"):
                parts.append(orjson.dumps(message["tool_calls"]).decode())
        if body.get("tools"):
            parts.append(orjson.dumps(body["tools"]).decode())
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode()


def by_size(raw_bytes: int, threshold: int, band: float) -> Estimate | None:
    """When even the whole body's size, as tokens, is well under the threshold: that upper bound (method
    "bytes"), without looking into the body; else None."""
    if raw_bytes / BYTES_PER_TOKEN < (1 - band) * threshold:
        return Estimate(int(raw_bytes / BYTES_PER_TOKEN), "bytes")
    return None


async def estimate(
    body: dict[str, Any],
    threshold: int,
    band: float,
    exact: Callable[[dict[str, Any]], Awaitable[int | None]],
) -> Estimate:
    """From the prompt's text by bytes far from the threshold, ``exact`` near it (call :func:`by_size` first: a
    body far under the threshold needs neither)."""
    rough = int(len(prompt_text(body).encode()) / BYTES_PER_TOKEN)
    if abs(rough - threshold) > band * threshold:
        return Estimate(rough, "bytes")
    counted = await exact(body)
    return Estimate(counted, "tokenize") if counted is not None else Estimate(rough, "bytes-fallback")
