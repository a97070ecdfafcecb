"""The plan's predicted speed and a fit of its constants, as tables (`servelab plan`)."""

from __future__ import annotations

from rich.table import Table

from servelab.cli._common import console
from servelab.core.errors import UsageError
from servelab.plan import Fit, SpeedPrediction


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else f"{n:,}"


def show_speed(s: SpeedPrediction) -> None:
    """Decode per stream and in aggregate at each concurrency, then prefill and the queued TTFT."""
    c = s.constants
    title = (f"predicted decode at {_tokens(s.length)} tokens a stream ({c.bandwidth_gbs:,.0f} GB/s x "
             f"{c.bandwidth_efficiency:.2f}, {c.tflops:,.0f} TFLOP/s x {c.flop_efficiency:.2f}, "
             f"{c.step_overhead_s * 1e3:.2f} ms a step: {c.source})")  # fmt: skip
    table = Table("streams", "read a step", "step", "tok/s per stream", "tok/s aggregate", "bound", title=title,
                  title_justify="left")  # fmt: skip
    for p in s.points:
        table.add_row(f"{p.concurrency:,}", f"{p.bytes_per_step / 1e9:,.2f} GB", f"{p.step_ms:,.2f} ms",
                      f"{p.tok_s_per_stream:,.1f}", f"{p.tok_s_aggregate:,.0f}", p.bound)  # fmt: skip
    out = console()
    out.print(table)
    out.print(f"prefill of {s.prompt_tokens:,} tokens: {s.prefill_ms:,.0f} ms alone; TTFT of the last of "
              f"{s.concurrency} such prompts arriving together: {s.ttft_last_ms:,.0f} ms")  # fmt: skip
    for note in s.notes:
        out.print(f"note: {note}", markup=False, highlight=False)


def show_fit(fit: Fit) -> None:
    """Each measured point beside the fitted prediction, fitted and held-out points apart, with the residuals."""
    table = Table("point", "streams", "length", "measured tok/s", "predicted", "residual", "bound",
                  title=f"speed constants fitted ({_held_by(fit)} held out)", title_justify="left")  # fmt: skip
    for r in fit.rows:
        table.add_row("held out" if r.held_out else "fitted", f"{r.point.concurrency:,}", f"{r.point.length:,}",
                      f"{r.point.tok_s:,.1f}", f"{r.predicted_tok_s:,.1f}", f"{r.residual:+.1%}", r.bound)  # fmt: skip
    held = "none held out"
    if fit.rms_held_out is not None:
        held = f"{fit.rms_held_out:.1%} on {len(fit.held_out)} held out"
    table.caption = f"rms residual {fit.rms_fit:.1%} on the fitted points, {held}"
    out = console()
    out.print(table)
    for name in fit.undetermined:
        out.print(f"note: the {name} is not determined by these points (none was bound by it): the default is kept "
                  "where it is higher")  # fmt: skip


def held_levels(text: str | None) -> frozenset[int] | None:
    """``--hold-out 1,4`` as the set of concurrencies held out of a fit; None: the fit's own every third point."""
    if text is None:
        return None
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words or not all(w.isdigit() and int(w) >= 1 for w in words):
        raise UsageError(f"--hold-out wants concurrencies like 1,4, got {text!r}")
    return frozenset(int(w) for w in words)


def _held_by(fit: Fit) -> str:
    if fit.hold_out is None:
        return "every third point"
    return "the steps at " + ", ".join(map(str, fit.hold_out)) + " streams"
