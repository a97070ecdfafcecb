"""A bench run as a section: the targets side by side, the SLO answers, the engine's /metrics, the plots."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from servelab.core.figures import MIN_INTERVAL, estimate_text, pct_text
from servelab.core.records import RequestRecord
from servelab.core.results import BenchRun, Cell, Row, SloSearch, Step
from servelab.core.stats import Interval
from servelab.core.summary import Summary, inter_chunk_gaps_ms, ttft_ms
from servelab.report import plots
from servelab.report.model import INTERVAL_MIN, Section, Table, add_plot, can_differ, fmt, say
from servelab.report.sessions_view import sessions

COMPARE_NOTE = (
    f"median [95% bootstrap interval] (from fewer than {MIN_INTERVAL} requests: their count, no interval); * the "
    "first two targets differ (Mann-Whitney U, p < 0.05); against: the "
    "second's per-stream speed as a multiple of the first's, its TTFT difference, its aggregate as a multiple"
)


def bench(out: Section, result: BenchRun, records: list[RequestRecord] | None) -> None:
    if result.rows:
        out.tables.append(compare_table(result.rows, "Side by side"))
    if result.steps:
        out.tables.append(steps_table(result.steps))
    if any(s.bottleneck for s in result.steps):
        out.tables.append(bottleneck_table(result.steps))
        _limit_verdicts(out, result.steps)
    for step in result.steps:
        if step.no_verdict:
            say(out, f"{step.target}/{step.scenario}: {step.no_verdict}", "")
    sessions(out, result.steps)
    for target, search in result.slo.items():
        out.tables.append(_slo_table(target, search))
        say(out, slo_verdict(target, search), f"SLO: {_slo_text(search)}")
        if search.over == "sessions" and (held := held_and_broke(target, search, result.steps)):
            say(out, held, "each level's session figures, from its step")
    _bench_verdicts(out, result.rows)
    if scraped := {t: m.derived for t, m in result.metrics.items() if m.derived.get("samples")}:
        out.tables.append(metrics_table(scraped))
    for t, m in result.metrics.items():
        _spec_verdict(out, t, m.derived)
    out.problems += result.warnings
    if records is not None:
        _latency_plots(out, records)
        _concurrency_plot(out, result)
        _slo_plot(out, result)
        _metrics_plots(out, result)


def _iv(iv: Interval | None, n: int, digits: int = 1) -> str:
    return estimate_text(iv, n, digits)


def compare_table(rows: list[Row], caption: str) -> Table:
    """One column per target; each cell: per-stream tok/s, TTFT ms, aggregate tok/s, and the failures."""
    targets = list(dict.fromkeys(t for row in rows for t in row.cells))
    headers = ["scenario", *(f"{t}\ntok/s | TTFT ms | agg tok/s" for t in targets)]
    headers += [f"{targets[1]}\nagainst {targets[0]}"] if len(targets) == 2 else []
    body = []
    for row in rows:
        cells = [row.scenario]
        for t in targets:
            c = row.cells.get(t)
            if c is None:
                cells.append("-")
                continue
            mark_s = "*" if row.differs.get("tok_s") else ""
            mark_t = "*" if row.differs.get("ttft_ms") else ""
            failed = f" ({c.n - c.ok} of {c.n} FAILED: {', '.join(c.failures)})" if c.ok < c.n else f" (n={c.n})"
            speed, ttft = _iv(c.tok_s, len(c.speeds)), _iv(c.ttft_ms, len(c.ttfts))
            cells.append(f"{speed}{mark_s}\n{ttft}{mark_t}\n{fmt(c.aggregate_tok_s)}{failed}")
        if len(targets) == 2:
            cells.append(_against(row.cells.get(targets[0]), row.cells.get(targets[1])))
        body.append(cells)
    return Table(caption, headers, body, note=COMPARE_NOTE)


STEPS_NOTE = (
    "per request: TTFT sent -> first token; ITL the gaps between token chunks; TPOT the decode time per output "
    "token; E2E sent -> last byte; req/s and "
    "tokens over the active window; a step with failed requests says so (its figures are the ok requests only); "
    "a percentile its samples cannot support is shown as the largest sample with their count (max 41.0 (n=5))"
)


def _pair(s: Summary, name: str, digits: int = 1, scale: float = 1.0) -> str:
    """``p50/p99``, each printed as a percentile only where its samples support it (core.figures)."""
    return f"{s.figure(name, 'p50').text(digits, scale)}/{s.figure(name, 'p99').text(digits, scale)}"


def _against(first: Cell | None, second: Cell | None) -> str:
    """The second target's medians against the first's: the speed ratio, the TTFT difference, the aggregate ratio."""
    if first is None or second is None:
        return "-"
    speed = _ratio(second.tok_s, first.tok_s)
    ttft = second.ttft_ms.estimate - first.ttft_ms.estimate if second.ttft_ms and first.ttft_ms else None
    aggregate = second.aggregate_tok_s / first.aggregate_tok_s if first.aggregate_tok_s else None
    return f"x{fmt(speed, 2)}\n{'-' if ttft is None else f'{ttft:+,.1f}'} ms\nx{fmt(aggregate, 2)}"


def _ratio(a: Interval | None, b: Interval | None) -> float | None:
    return a.estimate / b.estimate if a and b and b.estimate else None


def steps_table(steps: list[Step]) -> Table:
    """Every step's figures, the ok requests' p50/p99, and how many failed and why."""
    several = len({s.target for s in steps}) > 1
    rows = []
    for step in steps:
        s = step.summary
        name = f"{step.target}\n{step.scenario}" if several else step.scenario
        ok = f"{s.ok}/{s.requests}" + ("\nFAILED" if s.failures else "")
        figures = [_pair(s, "ttft_ms"), _pair(s, "itl_ms"), _pair(s, "tpot_ms"), _pair(s, "e2e_ms", 2, 1e-3)]
        rows.append([name, ok, *figures, fmt(s.requests_per_s, 2), f"{s.input_tokens}/{s.output_tokens}"])
    headers = ["step", "ok/n", "TTFT ms\np50/p99", "ITL ms\np50/p99", "TPOT ms\np50/p99", "E2E s\np50/p99", "req/s",
               "tokens\nin/out"]  # fmt: skip
    return Table("Every step", headers, rows, note=STEPS_NOTE)


BOTTLENECK_NOTE = (
    "client: the load processes' most loaded CPU (of one core) and event-loop lag p99; in flight: the client's "
    "mean requests in flight / the engine's running + waiting at the same scrapes; tok/s: the client's streamed "
    "rate / the engine's generation counter over the step"
)


def bottleneck_table(steps: list[Step]) -> Table:
    """Every step's limit and the figures it rests on."""
    several = len({s.target for s in steps}) > 1
    rows = []
    for step in steps:
        if step.bottleneck is None:
            continue
        ev = step.bottleneck.evidence
        name = f"{step.target}\n{step.scenario}" if several else step.scenario
        cpu, lag = ev.get("client_cpu_max"), ev.get("loop_lag_p99_ms")
        engine = _num(ev.get("engine_running_mean"), 1) + "+" + _num(ev.get("engine_waiting_mean"), 1)
        near, relief = ", ".join(step.bottleneck.near), step.bottleneck.relieved
        tested = f"\n({relief.what}: {relief.change:+.0%})" if relief else ""
        rows.append([
            name,
            step.bottleneck.limit + (f"\n({near} near too)" if near else "") + tested,
            f"x{ev.get('workers', 1)} {_num(cpu, 0, 100)}% {_num(lag, 1)} ms",
            f"{_num(ev.get('in_flight_mean'), 1)} / {engine}",
            f"{_num(ev.get('client_tok_s'), 0)} / {_num(ev.get('engine_tok_s'), 0)}",
        ])  # fmt: skip
    headers = ["step", "limit", "client\nworkers cpu lag", "in flight\nclient / engine", "tok/s\nclient / engine"]
    return Table("Where the ceiling was", headers, rows, note=BOTTLENECK_NOTE)


def _num(value: object, digits: int, scale: float = 1.0) -> str:
    return fmt(value * scale, digits) if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def bottleneck_line(step: Step) -> str:
    assert step.bottleneck is not None
    hint = f" ({step.bottleneck.hint})" if step.bottleneck.hint else ""
    note = f"; {step.bottleneck.note}" if step.bottleneck.note else ""
    return (
        f"{step.target}/{step.scenario}: limited by the {step.bottleneck.limit}: {step.bottleneck.reason}{hint}{note}"
    )


def _slo_text(search: SloSearch) -> str:
    names = (("ttft_ms", "TTFT"), ("itl_ms", "every ITL gap"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E"))
    limits = [f"{label} <= {search.slo[k]:g} ms" for k, label in names if search.slo.get(k)]
    share = search.slo.get("attainment")
    judged = "of the turns past each session's first" if search.turns == "warm" else "of requests"
    return ", ".join(limits) + (f" for {share:.0%} {judged}" if isinstance(share, float) else "")


def _slo_table(target: str, search: SloSearch) -> Table:
    unit = " req/s" if search.over == "rate" else ""
    tried = ", ".join(f"{lvl:g}{unit}: {pct_text(att)}{'' if ok else ' x'}" for lvl, att, ok in search.tried)
    return Table(
        f"{target}: SLO {_slo_text(search)}",
        ["target", "levels tried (share within the SLO)", f"highest {search.over} within the SLO"],
        [[target, tried or "-", _best(search)]],
    )


def _best(search: SloSearch) -> str:
    unit = " req/s" if search.over == "rate" else ""
    short = "" if search.done else " (the search was cut short: of the levels tried)"
    if search.best:
        return f"{search.best:g}{unit}{short}"
    if not search.tried:
        return "none: the search was cut short before a level was judged"
    return f"none (even {search.tried[0][0]:g}{unit} fails)"


def held_and_broke(target: str, search: SloSearch, steps: list[Step]) -> str | None:
    """What held at the session count found and what broke at the first level tried past it: the later turns'
    TTFT, the hit share and the engine's preemptions and KV usage, from those steps' own figures."""
    past = sorted(level for level, _, met in search.tried if not met and (search.best is None or level > search.best))
    said = []
    for level, verb in ((search.best, "hold"), (past[0] if past else None, "miss")):
        if level is not None and (text := _session_figures(target, int(level), steps)):
            said.append(f"{_level(level)} {verb}: {text}")
    return f"{target}: " + "; ".join(said) if said else None


def _level(level: float | None) -> str:
    return f"{level:g} session{'' if level == 1 else 's'}"


def _session_figures(target: str, level: int, steps: list[Step]) -> str | None:
    step = next((s for s in steps if s.target == target and s.labels.level == level and s.sessions), None)
    if step is None or step.sessions is None:
        return None
    f = step.sessions
    parts = [f"later turns' TTFT p50 {fmt(f.later_turn_ttft_ms_p50, 0)} ms"]
    parts += [f"hit share {pct_text(f.hit_share)}"] if f.hit_share is not None else []
    preempted, kv = f.engine.get("preemptions"), f.engine.get("kv_usage_max")
    parts += [f"preemptions {fmt(float(preempted), 0)}"] if isinstance(preempted, int | float) else []
    parts += [f"KV cache {pct_text(float(kv))} used at most"] if isinstance(kv, int | float) else []
    return ", ".join(parts)


def slo_verdict(target: str, search: SloSearch) -> str:
    return f"{target}: highest {search.over} within the SLO: {_best(search)}"


def _pct(value: object) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, float) else "-"


def metrics_table(scraped: Mapping[str, Mapping[str, object]]) -> Table:
    """What each target's /metrics said over the run."""
    rows = []
    for target, derived in scraped.items():
        running = derived.get("running_max")
        rows.append([target, str(derived.get("samples")), _pct(derived.get("kv_usage_max")),
                     fmt(running if isinstance(running, int | float) else None, 0),
                     _pct(derived.get("prefix_hit_rate"))])  # fmt: skip
    headers = ["target", "scrapes", "KV usage\nmax", "running\nmax", "prefix\nhit rate"]
    return Table("The engine's /metrics", headers, rows)


def _spec_verdict(out: Section, target: str, derived: Mapping[str, object]) -> None:
    if derived.get("spec_warning"):
        say(out, f"{target}: {derived['spec_warning']}")
        return
    rate, length = derived.get("spec_acceptance_rate"), derived.get("spec_mean_accepted_length")
    if isinstance(rate, float):
        mean = fmt(length if isinstance(length, float) else None, 2)
        say(out, f"{target}: draft acceptance {rate:.2f}", f"mean accepted length {mean} (the engine's /metrics)")


def _limit_verdicts(out: Section, steps: list[Step]) -> None:
    """One verdict per target: which side set the speed at which steps; a step with fewer than
    :data:`INTERVAL_MIN` ok requests is too short to judge (its full verdict stays in the evidence)."""
    for target in dict.fromkeys(s.target for s in steps):
        mine = [s for s in steps if s.target == target and s.bottleneck]
        if not mine:
            continue
        limits: dict[str, list[str]] = defaultdict(list)
        few = [s for s in mine if s.summary.ok < INTERVAL_MIN]
        for s in mine:
            if s not in few and s.bottleneck:
                limits[s.bottleneck.limit].append(s.scenario)
        parts = [f"the {lim} set the speed at {_where(names, len(mine))}" for lim, names in limits.items()]
        if few:
            ns = "/".join(str(n) for n in sorted({s.summary.ok for s in few}))
            where = _where([s.scenario for s in few], len(mine), every="any step")
            parts.append(f"too few requests to judge what limited {where} (n={ns})")
        say(out, f"{target}: " + "; ".join(parts), "\n".join(bottleneck_line(s) for s in mine))


def _where(names: list[str], total: int, every: str = "every step") -> str:
    return every if len(names) == total else ", ".join(names)


def _bench_verdicts(out: Section, rows: list[Row]) -> None:
    """One line for the speeds: a target's range over the scenarios, or the second's against the first, saying how
    many differences lie outside the noise; the per-scenario figures are its evidence."""
    targets = list(dict.fromkeys(t for r in rows for t, c in r.cells.items() if c.tok_s))
    if len(targets) == 1:
        (t,) = targets
        cells = [(r.scenario, r.cells[t]) for r in rows if t in r.cells and r.cells[t].tok_s]
        speeds = [c.tok_s.estimate for _, c in cells if c.tok_s]
        lines = [f"{name}: {fmt(c.tok_s.estimate if c.tok_s else None)} tok/s (n={c.ok})" for name, c in cells]
        say(out, f"{t}: {_span(speeds, 1)} tok/s per stream over {len(cells)} scenarios (medians)", "\n".join(lines))
    elif len(targets) >= 2:
        _pair_verdict(out, rows, targets[0], targets[1])


def _pair_verdict(out: Section, rows: list[Row], a: str, b: str) -> None:
    ratios, lines, outside, testable = [], [], 0, 0
    for r in rows:
        ca, cb = r.cells.get(a), r.cells.get(b)
        ratio = _ratio(ca.tok_s if ca else None, cb.tok_s if cb else None)
        if ratio is None or ca is None or cb is None:
            continue
        ratios.append(ratio)
        outside += bool(r.differs.get("tok_s"))
        testable += can_differ(ca.ok, cb.ok)
        noise = "outside the noise" if r.differs.get("tok_s") else "within the noise"
        noise = noise if can_differ(ca.ok, cb.ok) else "too few to tell"
        lines.append(f"{r.scenario}: {ratio:.2f}x ({noise}; n={ca.ok} and {cb.ok})")
    if not ratios:
        return
    noise = f"{outside} of {len(ratios)} outside the noise" if outside else "all within the noise"
    noise = noise if testable else "too few requests to tell from noise"
    say(out, f"{a} streams at {_span(ratios, 2)}x the speed of {b} ({noise})", "\n".join(lines))


def _span(values: list[float], digits: int) -> str:
    low, high = fmt(min(values), digits), fmt(max(values), digits)
    return low if low == high else f"{low}-{high}"


# ---- plots (HTML only) ------------------------------------------------------------------------------------------
def _latency_plots(out: Section, records: list[RequestRecord]) -> None:
    ttfts: dict[str, list[float]] = defaultdict(list)
    gaps: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if not r.ok:
            continue
        if (t := ttft_ms(r)) is not None:
            ttfts[f"{r.target}/{r.scenario}"].append(t)
        gaps[r.target] += inter_chunk_gaps_ms(r)
    ttft_png = plots.survival(ttfts, "TTFT (ms)", "TTFT by target and scenario")
    add_plot(out, "Time to first token", ttft_png, plots.too_few(ttfts))
    gaps_png = plots.survival(gaps, "gap between chunks (ms)", "Inter-chunk gaps by target")
    add_plot(out, "Inter-chunk gaps", gaps_png, plots.too_few(gaps))


def _concurrency_plot(out: Section, result: BenchRun) -> None:
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    fewest: dict[str, int] = {}
    for step in result.steps:
        level, sweep = step.labels.level, step.labels.sweep_of
        if level is not None and sweep is not None and step.labels.phase is None:
            name = f"{step.target}/{sweep}"
            points[name].append((float(level), float(step.summary.aggregate_tok_s)))
            fewest[name] = min(fewest.get(name, step.summary.ok), step.summary.ok)
    named = {f"{k} (n>={fewest[k]} a level)": v for k, v in points.items()}
    title = "Throughput against concurrency"
    add_plot(out, title, plots.lines(named, "concurrent streams", "aggregate tok/s", title))


def _slo_plot(out: Section, result: BenchRun) -> None:
    if not result.slo:
        return
    curves = {t: [(float(level), 100 * float(att)) for level, att, _ in s.tried] for t, s in result.slo.items()}
    over = next(iter(result.slo.values())).over
    add_plot(out, "SLO search", plots.lines(curves, over, "% of requests within the SLO", "SLO attainment"))


def _metrics_plots(out: Section, result: BenchRun) -> None:
    for target, m in result.metrics.items():
        series = {k: [(float(t), float(v)) for t, v in pts] for k, pts in m.series.items() if pts}
        queue = {k: v for k, v in series.items() if k in ("running", "waiting")}
        kv = {k: [(t, 100 * v) for t, v in pts] for k, pts in series.items() if k == "kv_usage"}
        add_plot(out, f"{target}: requests running and waiting", plots.lines(queue, "s", "requests", "/metrics queue"))
        add_plot(out, f"{target}: KV cache usage", plots.lines(kv, "s", "% of the KV cache", "/metrics KV usage"))
