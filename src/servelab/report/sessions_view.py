"""A session step in the report: each turn's TTFT, prompt and cached tokens; each session's outcome; TTFT against
the prompt's length and the cache's share over time (plots); one short verdict per step (first turn against later
turns, the hit share, the engine's preemptions), its figures as evidence. A percentile is printed with its count."""

from __future__ import annotations

from servelab.core.results import Step
from servelab.core.results.sessions import SessionFigures
from servelab.report import plots
from servelab.report.model import Section, Table, add_plot, fmt, say

TURNS_NOTE = (
    "per turn, every session's n-th turn together: TTFT p50/p95 (ms) with the turns' count; prompt and cached "
    "tokens (the server's usage; cached: prompt_tokens_details.cached_tokens) p50; hit share: cached over prompt "
    "tokens of the turns that reported both"
)


def sessions(out: Section, steps: list[Step]) -> None:
    """Every session step of a bench: its table, its verdict and its two plots."""
    stepped = [(s, s.sessions) for s in steps if s.sessions is not None]
    for step, figures in stepped:
        name = f"{step.target}/{step.scenario}"
        out.tables.append(turns_table(name, figures))
        say(out, verdict(name, figures), evidence(figures))
    if stepped:
        _plots(out, stepped)


def turns_table(name: str, f: SessionFigures) -> Table:
    rows = [
        [str(t.turn), f"{t.ok}/{t.requests}", f"{fmt(t.ttft_ms_p50)}/{_p95(t.ttft_ms_p95, t.ok)}",
         fmt(t.prompt_tokens_p50, 0), fmt(t.cached_tokens_p50, 0), _share(t.hit_share)]
        for t in f.per_turn
    ]  # fmt: skip
    headers = ["turn", "ok/n", "TTFT ms\np50/p95", "prompt\ntokens", "cached\ntokens", "hit\nshare"]
    caption = f"Sessions: {name} ({f.sessions} sessions, {f.turns} turns, {f.compactions} compactions)"
    return Table(caption, headers, rows, note=TURNS_NOTE)


def _p95(value: float | None, n: int) -> str:
    """A p95 only from 20 samples up (one sample past it); else the count, said."""
    return fmt(value) if n >= 20 else f"few (n={n})"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{min(value, 1.0):.0%}"


def verdict(name: str, f: SessionFigures) -> str:
    if not f.ok:
        return f"{name}: no turn answered"
    first, later = f.first_turn_ttft_ms_p50, f.later_turn_ttft_ms_p50
    turns = f"later turns' TTFT {fmt(later, 0)} ms against the first's {fmt(first, 0)} ms" if later else "one turn"
    return f"{name}: {f.sessions} sessions, {turns}, {_share(f.hit_share)} of prompt tokens cached"


def evidence(f: SessionFigures) -> str:
    engine = ", ".join(f"{k} {v}" for k, v in f.engine.items())
    parts = [f"{f.ok} of {f.turns} turns answered; session duration p50 {fmt(f.duration_s_p50, 1)} s",
             f"turn TTFT p95 {fmt(f.turn_ttft_ms_p95)} ms" if f.ok >= 20 else f"turn TTFT p95: too few turns ({f.ok})",
             f"engine: {engine}" if engine else ""]  # fmt: skip
    return "\n".join(p for p in parts if p)


def _plots(out: Section, stepped: list[tuple[Step, SessionFigures]]) -> None:
    ttft = {f"{s.target}/{s.scenario} (n={len(f.ttft_vs_prompt)})": [(float(p), t) for p, t in f.ttft_vs_prompt]
            for s, f in stepped}  # fmt: skip
    title = "TTFT against the prompt's length"
    add_plot(out, title, plots.scatter(ttft, "prompt tokens", "TTFT ms", title))
    share = {f"{s.target}/{s.scenario}": [(t, 100 * v) for t, v in f.hit_share_over_time] for s, f in stepped}
    title = "Prompt tokens found in the cache"
    add_plot(out, title, plots.lines(share, "s from the step's start", "% cached", title))
