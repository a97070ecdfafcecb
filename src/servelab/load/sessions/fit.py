"""A session workload against a target's context: the most prompt tokens a turn may send, and a spec that can run
there at all (a compacted session must still hold its head, its summary, a turn and a reply). A preset on a shorter
target is scaled to fit, its shape kept (lengths in proportion to the context it was written for), and says so; a
user's own spec is refused, since its lengths are what the user asked to measure."""

from __future__ import annotations

from collections.abc import Callable

from servelab.core.errors import UsageError
from servelab.load.runner import CHAT_MARGIN
from servelab.load.sessions.conversation import ESTIMATE_SLACK, MESSAGE_MARGIN, TOOL_CALL_MARGIN
from servelab.load.sessions.spec import SessionSpec, Span


def prompt_limit(spec: SessionSpec, context: int | None) -> Callable[[int], int | None]:
    """The most prompt tokens a turn asking for ``output`` tokens may send: the context less the reply and a chat
    template's margin, and no more than ``compact_at``; None where neither is known."""

    def limit(output: int) -> int | None:
        bounds = [b for b in (spec.compact_at, None if context is None else context - output - CHAT_MARGIN) if b]
        return min(bounds) if bounds else None

    return limit


MARGINS = CHAT_MARGIN + 3 * MESSAGE_MARGIN + TOOL_CALL_MARGIN  # a compacted tool turn's template margins, at most


def needed(spec: SessionSpec) -> int:
    """The context a compacted turn needs at most: head, summary, the longest turn and reply, with the margins."""
    return int(_text(spec) * ESTIMATE_SLACK) + MARGINS + spec.output_tokens.high


def fit_spec(spec: SessionSpec, context: int | None, target: str) -> tuple[SessionSpec, str | None]:
    """``spec`` as it runs on a target of ``context`` tokens, and the warning that says what changed (None: as
    written). A spec the context cannot hold is refused, saying what it needs."""
    if context is None:
        told = None if spec.compact_at else f"{target} states no context: the sessions are never compacted"
        return spec, told
    fitted, told = spec, None
    shorter = spec.context is not None and context < spec.context
    if spec.preset and (shorter or needed(spec) > context):
        fits = 0.99 * (context - MARGINS - spec.output_tokens.high) / (_text(spec) * ESTIMATE_SLACK)  # rounding room
        factor = max(0.0, min(fits, context / spec.context if spec.context else 1.0))
        fitted = _scaled(spec, factor)
        told = (
            f"{spec.name} was written for {spec.context or needed(spec):,} tokens; on {target}'s {context:,} its head, "
            f"turns and summary are scaled by {factor:.3g} (head {_span(fitted.head_tokens)}, turns "
            f"{_span(fitted.turn_tokens)}, summary {fitted.summary_tokens:,} tokens)"
        )
    if needed(fitted) > context:
        raise UsageError(
            f"{spec.name} cannot run within {target}'s context of {context:,} tokens: a compacted turn needs up to "
            f"{needed(fitted):,} (head {fitted.head_tokens.high:,}, summary {fitted.summary_tokens:,}, turn "
            f"{fitted.turn_tokens.high:,}, reply {fitted.output_tokens.high:,} and the template's margins)",
            hint="shorten head_tokens, summary_tokens, turn_tokens or output_tokens, or serve a longer context",
        )
    return fitted, told


def _text(spec: SessionSpec) -> int:
    return spec.head_tokens.high + spec.summary_tokens + spec.turn_tokens.high


def _scaled(spec: SessionSpec, factor: float) -> SessionSpec:
    shared = round(spec.shared_tokens * factor)
    head = spec.head_tokens.scaled(factor, floor=max(1, shared))
    return spec.model_copy(
        update={
            "head_tokens": head,
            "shared_tokens": shared,
            "turn_tokens": spec.turn_tokens.scaled(factor),
            "summary_tokens": max(1, round(spec.summary_tokens * factor)),
            "compact_at": None if spec.compact_at is None else max(1, round(spec.compact_at * factor)),
        }
    )


def _span(span: Span) -> str:
    low, high = span.low, span.high
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"
