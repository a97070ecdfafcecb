"""A sweep run as a section: each point's flags with the plan's KV capacity beside the engine's logged one, its start
and what it measured or why it failed; the Pareto front of tok/s per user against tok/s per GPU; and the best point
under the sweep's SLO, named with its command line."""

from __future__ import annotations

from typing import Any

from servelab.core.figures import Figure, fmt_number, proportion_text, supports
from servelab.core.results.sweep import PointEval, PointFigures, SweepPoint, SweepRun
from servelab.report import plots
from servelab.report.gpu_view import add_point_gpu_table
from servelab.report.model import Section, Table, add_plot, say
from servelab.sweep import Candidate, SessionsHeld, best_under, candidates, pareto_front, sessions_held

POINT_HEADERS = ["point", "flags", "plan KV", "logged KV", "difference", "start", "measured", "failure"]


def sweep_section(out: Section, result: SweepRun, with_plots: bool = False,
                  telemetry: dict[int, dict[str, Any]] | None = None) -> None:  # fmt: skip
    counts = {s: sum(p.status == s for p in result.points) for s in ("measured", "failed", "skipped")}
    done = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none done"
    out.facts = [f for f in out.facts if f[0] != "requests failed"]  # its requests are in each point's bench run
    out.facts[:0] = [("engine", f"{result.engine}: {result.model}"), ("points", f"{done} of {len(result.planned)}")]
    rows = [_point_row(p) for p in result.points]
    rows += [[str(i), key, "-", "-", "-", "-", "not run yet", "-"] for i, key in enumerate(result.planned)
             if key not in {p.key for p in result.points}]  # fmt: skip
    note = ("KV: the engine's KV cache size in tokens, as planned for the point's flags and as its start-up log said; "
            "difference: planned less logged; start: seconds to /health, cold (compiled now) or cached; measured: "
            "per step, median tok/s per user, aggregate tok/s, TTFT p95")  # fmt: skip
    out.tables.append(Table("The points", POINT_HEADERS, rows, note=note))
    add_point_gpu_table(out, result, telemetry or {})
    _plan_verdict(out, result)
    _sessions(out, result)
    found = candidates(result)
    if found:
        front = pareto_front(found)
        out.tables.append(Table("Pareto front: tok/s per user against tok/s per GPU",
                                ["point", "step", "tok/s per user", "tok/s per GPU", "TTFT p95 (ms)", "flags"],
                                [_front_row(c) for c in front],
                                note="no other measured step is faster on both"))  # fmt: skip
        _best(out, result, found)
        if with_plots:
            _plots(out, found)
    for p in result.points:
        if p.failure is not None:
            out.problems.append(f"point {p.index} ({p.key}): {p.failure.kind}: {p.failure.reason}")


def _point_row(p: SweepPoint) -> list[str]:
    planned = p.plan.kv_tokens if p.plan else None
    logged = p.logged.kv_tokens if p.logged else None
    plan_text = fmt_number(planned, 0) if planned is not None else "-"
    if p.plan and p.plan.error:
        plan_text = f"no plan: {p.plan.error}"
    if p.plan and p.plan.fits is False:
        plan_text += "\n(does not fit)"
    diff = _difference(planned, logged)
    start = "-"
    if p.start is not None and p.start.seconds is not None:
        start = f"{p.start.seconds:,.0f} s\n{p.start.cache}"
    lines = [*(_step_text(f) for f in p.figures), *(_eval_text(e) for e in p.evals), *p.while_measured]
    measured = "\n".join(lines) or (p.skipped or "-")
    failure = f"{p.failure.kind}:\n{p.failure.reason}" if p.failure else "-"
    return [str(p.index), p.key, plan_text, fmt_number(logged, 0) if logged is not None else "-", diff, start,
            measured, failure]  # fmt: skip


def _difference(planned: int | None, logged: int | None) -> str:
    if planned is None or logged is None:
        return "-"
    share = f" ({(planned - logged) / logged:+.1%})" if logged else ""
    return f"{planned - logged:+,}{share}"


def _step_text(f: PointFigures) -> str:
    ttft = Figure(0.95, f.ttft_p95_ms, f.ttft_n, f.ttft_max_ms).labelled(0, "ms")
    user = fmt_number(f.tok_s_per_user) if f.tok_s_per_user is not None else "-"
    aggregate = fmt_number(f.aggregate_tok_s) if f.aggregate_tok_s is not None else "-"
    failed = f", {f.requests - f.ok} failed" if f.ok < f.requests else ""
    return f"{f.scenario}, {f.ok} ok{failed}: {user} tok/s per user, {aggregate} aggregate, TTFT {ttft}"


def _eval_text(e: PointEval) -> str:
    return f"eval {e.suite}: {proportion_text(e.k, e.n, e.low, e.high)} strict"


def _front_row(c: Candidate) -> list[str]:
    ttft = fmt_number(c.ttft_p95_ms, 0) if c.ttft_p95_ms is not None else "-"
    return [str(c.point), c.step, fmt_number(c.per_user), fmt_number(c.per_gpu), ttft, c.key]


def _plan_verdict(out: Section, result: SweepRun) -> None:
    both = [p for p in result.points if p.plan and p.plan.kv_tokens is not None and p.logged
            and p.logged.kv_tokens is not None]  # fmt: skip
    if not both:
        return
    exact = [p for p in both if p.plan.kv_tokens == p.logged.kv_tokens]  # type: ignore[union-attr]
    evidence = "\n".join(f"point {p.index} ({p.key}): planned {p.plan.kv_tokens:,}, logged {p.logged.kv_tokens:,}"  # type: ignore[union-attr]
                         for p in both)  # fmt: skip
    say(
        out, f"the plan's KV capacity equalled the engine's log on {len(exact)} of {len(both)} started points", evidence
    )


def _best(out: Section, result: SweepRun, found: list[Candidate]) -> None:
    attainment = result.slo.get("attainment") if result.slo else None
    best = best_under(found, attainment)
    limits = ", ".join(f"{k.removesuffix('_ms')} {v:g} ms" for k, v in result.slo.items()
                       if k != "attainment" and v is not None)  # fmt: skip
    under = f"under the SLO ({limits}, {attainment:.0%} of requests)" if attainment is not None else "(no SLO given)"
    if best is None:
        say(out, f"no measured point kept the SLO {under.removeprefix('under the SLO ')} with a plan that fits")
        return
    say(out, f"best {under}: point {best.point} at {best.step}: {fmt_number(best.per_gpu)} tok/s per GPU, "
             f"{fmt_number(best.per_user)} tok/s per user", f"command: {best.command}")  # fmt: skip


def _sessions(out: Section, result: SweepRun) -> None:
    held = sessions_held(result)
    if not held:
        return
    out.tables.append(Table("Sessions held, beside the plan",
                            ["point", "scenario", "levels (met)", "held", "session size (tokens)", "plan: sessions",
                             "log: sessions"], [_held_row(h) for h in held],
                            note="held: the most concurrent sessions at which every level up to it kept the SLO; "
                                 "session size: the most tokens a turn held; plan and log: their KV cache size in "
                                 "tokens over that size"))  # fmt: skip


def _held_row(h: SessionsHeld) -> list[str]:
    levels = ", ".join(f"{n}{'' if met else ' x'}" for n, met in h.tried)
    held = "none" if h.held is None else str(h.held)

    def number(value: float | None, digits: int = 0) -> str:
        return fmt_number(value, digits) if value is not None else "-"

    return [
        str(h.point),
        h.scenario,
        levels,
        held,
        number(h.peak_tokens),
        number(h.plan_sessions, 2),
        number(h.logged_sessions, 2),
    ]


def _plots(out: Section, found: list[Candidate]) -> None:
    """The trade-offs drawn, a series per point: tok/s per user against tok/s per GPU, and TTFT p95 against tok/s
    per GPU (only steps whose TTFT samples support a p95; the rest are named under the plots)."""
    per_user: dict[str, list[tuple[float, float]]] = {}
    ttft: dict[str, list[tuple[float, float]]] = {}
    left_out: list[str] = []
    for c in found:
        name = f"point {c.point}"
        per_user.setdefault(name, []).append((c.per_gpu, c.per_user))
        if c.ttft_p95_ms is not None and supports(c.ttft_n, 0.95):
            ttft.setdefault(name, []).append((c.per_gpu, c.ttft_p95_ms))
        else:
            left_out.append(f"{name} {c.step}")
    add_plot(
        out,
        "tok/s per user against tok/s per GPU",
        plots.scatter(per_user, "tok/s per GPU", "tok/s per user", "Each measured step, per point"),
    )
    add_plot(
        out,
        "TTFT p95 against tok/s per GPU",
        plots.lines(ttft, "tok/s per GPU", "TTFT p95 (ms)", "Latency against throughput"),
        left_out,
    )
