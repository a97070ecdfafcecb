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
        room = None if context is None else context - output - CHAT_MARGIN
        bounds = [b for b in (spec.compact_at, room) if b is not None]
        return min(bounds) if bounds else None

    return limit


LINE_TOKENS = 12  # a filler line's tokens where the target has not counted them (texts are whole lines)
HEAD_MARK_TOKENS = 16  # the head's "[session NONCE]" line and the line breaks around it
MARGINS = 3 * MESSAGE_MARGIN + TOOL_CALL_MARGIN  # a compacted tool turn's template margins, at most


def compacted_prompt(spec: SessionSpec, line_tokens: float = LINE_TOKENS) -> int:
    """A bound on a compacted turn's prompt as a session counts it: head, summary and the longest turn, each text up
    to a line longer than asked (whole lines), the estimate's slack and the template's margins."""
    text = _text(spec) + 4 * line_tokens + HEAD_MARK_TOKENS  # shared head, own head, summary, turn: a line each
    return int(text * ESTIMATE_SLACK) + MARGINS


def needed(spec: SessionSpec, line_tokens: float = LINE_TOKENS) -> int:
    """The context a compacted turn needs at most: its prompt, the longest reply and a chat template's margin."""
    return compacted_prompt(spec, line_tokens) + spec.output_tokens.high + CHAT_MARGIN


def _fits(spec: SessionSpec, context: int, line_tokens: float) -> bool:
    within = spec.compact_at is None or compacted_prompt(spec, line_tokens) <= spec.compact_at
    return within and needed(spec, line_tokens) <= context


def fit_spec(
    spec: SessionSpec, context: int | None, target: str, line_tokens: float = LINE_TOKENS
) -> tuple[SessionSpec, str | None]:
    """``spec`` as it runs on a target of ``context`` tokens, and the warning that says what changed (None: as
    written). A spec the context (or its own ``compact_at``) cannot hold is refused, saying what it needs."""
    if context is None:
        told = None if spec.compact_at else f"{target} states no context: the sessions are never compacted"
        return spec, told
    fitted, told = spec, None
    shorter = spec.context is not None and context < spec.context
    if spec.preset and (shorter or not _fits(spec, context, line_tokens)):
        room = context - spec.output_tokens.high - CHAT_MARGIN - MARGINS - 4 * line_tokens - HEAD_MARK_TOKENS
        fits = 0.99 * room / (_text(spec) * ESTIMATE_SLACK)  # a hair under: rounding never tips it over
        factor = max(0.0, min(fits, context / spec.context if spec.context else 1.0))
        fitted = _scaled(spec, factor)
        told = (
            f"{spec.name} was written for {spec.context or needed(spec):,} tokens; on {target}'s {context:,} its head, "
            f"turns and summary are scaled by {factor:.3g} (head {_span(fitted.head_tokens)}, turns "
            f"{_span(fitted.turn_tokens)}, summary {fitted.summary_tokens:,} tokens)"
        )
    if not _fits(fitted, context, line_tokens):
        raise UsageError(
            f"{spec.name} cannot run within {target}'s context of {context:,} tokens"
            + (f" and its compact_at of {fitted.compact_at:,}" if fitted.compact_at else "")
            + f": a compacted turn needs up to {needed(fitted, line_tokens):,} (head {fitted.head_tokens.high:,}, "
            f"summary {fitted.summary_tokens:,}, turn {fitted.turn_tokens.high:,}, reply {fitted.output_tokens.high:,} "
            "and the template's margins)",
            hint="shorten head_tokens, summary_tokens, turn_tokens or output_tokens, raise compact_at, or serve a "
            "longer context",
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
