"""Replies that say the server decodes one repeated token for every stream: random (``--load-format dummy``)
weights decoding greedily. Such a step's speed is not real text's: every stream decodes the same token, so an MoE
reads one token's experts at any batch.

Rule: a reply *cycles* when its second half (its last ``TAIL`` characters at most) repeats a unit of at most
``MAX_PERIOD`` characters at least ``MIN_REPEATS`` times; a greedy step is said to cycle when more than half its
replies cycle and at least two of them (from different requests) end in the same unit. A sampled step (temperature
above 0) is never said to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from servelab.core.records import RequestRecord

MAX_PERIOD = 32  # characters: a cycle of one or two tokens
MIN_REPEATS = 4
TAIL = 1024  # characters of a long reply's end that are read: enough to see a short cycle, cheap on any reply


def cycle_unit(text: str) -> str | None:
    """The shortest unit the second half of ``text`` (its last ``TAIL`` characters at most) repeats, rotated to
    its smallest form, or None."""
    tail = text[max(len(text) // 2, len(text) - TAIL) :]
    for period in range(1, min(MAX_PERIOD, len(tail) // MIN_REPEATS) + 1):
        if tail[period : 2 * period] == tail[:period] and tail[period:] == tail[:-period]:  # cheap test first
            unit = tail[:period]
            return min(unit[i:] + unit[:i] for i in range(period))
    return None


def cycling_replies(records: Sequence[RequestRecord], temperature: float) -> str | None:
    """The warning for a greedy step whose replies cycle on one shared unit, else None."""
    if temperature > 0:
        return None
    replies = [r.output_text for r in records if r.ok and r.output_text and r.labels.phase != "warmup"]
    cycles = {text: unit for text in replies if (unit := cycle_unit(text)) is not None}
    cycling = [text for text in replies if text in cycles]
    if len(cycling) * 2 <= len(replies):
        return None
    unit, shared = Counter(cycles[text] for text in cycling).most_common(1)[0]
    if shared < 2:
        return None
    seen = next(text for text in cycling if cycles[text] == unit)[-2 * len(unit) :]  # as a reply ends, not rotated
    return (
        f"{len(cycling)} of {len(replies)} replies end repeating {seen!r}, {shared} of them the same cycle: random "
        "(dummy) weights decoding greedily? Every stream then decodes the same token and an MoE reads one token's "
        "experts at any batch: measure speed with --temperature 1"
    )
