"""An eval run and a repo-repair run as sections: outcomes with strict and semantic accuracy kept apart, who is
better, and the replies that were not correct with what the model said."""

from __future__ import annotations

from servelab.core.figures import proportion_text
from servelab.core.results import Channel, EvalRun, Reply, RepoRun
from servelab.report import plots
from servelab.report.model import Section, Table, add_plot, fmt

OUTCOMES = ("correct", "format_violation", "wrong", "error", "timeout")
MISSES_SHOWN = 20
REPLY_SHOWN = 60


def eval_section(out: Section, result: EvalRun, with_plots: bool) -> None:
    rows = []
    for target, t in result.targets.items():
        for suite, acc in [*t.suites.items(), ("all", t.all)]:
            rows.append([target, suite, *(str(acc.outcomes.get(k, 0)) for k in OUTCOMES), _rate(acc.strict),
                         _rate(acc.semantic)])  # fmt: skip
    if rows:
        headers = ["target", "suite", "correct", "format\nviolation", "wrong", "error", "timeout", "strict", "semantic"]
        note = "k/n, with the 95% Wilson interval; semantic = correct + format violations"
        out.tables.append(Table("Outcomes: strict format and semantics kept apart", headers, rows, note=note))
    out.verdicts += verdicts(result)
    misses = [r for r in result.replies if r.outcome != "correct"]
    if misses:
        out.tables.append(_misses(misses))
    out.problems += result.skipped + result.warnings
    if with_plots:
        counts = {t: {k: float(v.all.outcomes.get(k, 0)) for k in OUTCOMES} for t, v in result.targets.items()}
        add_plot(out, "Outcomes by target", plots.bars(counts, "replies", "Outcomes"))


def _rate(c: Channel) -> str:
    if not c.n or c.rate is None:
        return "-"
    return proportion_text(c.k, c.n, c.low, c.high, "\n")


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.0%}"


def _misses(misses: list[Reply]) -> Table:
    rows = [
        [m.target, f"{m.suite}/{m.item}#{m.repeat}", m.outcome.replace("_", " "), _said(m)]
        for m in misses[:MISSES_SHOWN]
    ]
    more = len(misses) - MISSES_SHOWN
    note = f"and {more} more (servelab runs export)" if more > 0 else "the model's reply, or the server's error"
    return Table("Replies that were not correct", ["target", "item", "outcome", "why / reply"], rows, note=note)


def _said(m: Reply) -> str:
    why = m.error or m.detail
    reply = m.reply.replace("\n", " ").strip()
    if len(reply) > REPLY_SHOWN:
        reply = reply[: REPLY_SHOWN - 1] + "…"
    return f"{why}\n{reply!r}" if reply and not m.error else why


def verdicts(result: EvalRun) -> list[str]:
    """The lines a person wants: violations against wrong answers, reliability, and who is better."""
    lines = []
    for target, data in result.targets.items():
        c = data.all.outcomes
        lines.append(
            f"{target}: {c.get('correct', 0)} correct, {c.get('format_violation', 0)} format violations, "
            f"{c.get('wrong', 0)} wrong, {c.get('error', 0)} errors, {c.get('timeout', 0)} timeouts"
        )
        rep = data.repeats
        if rep and rep.items and rep.pass_at_k is not None and rep.pass_hat_k is not None:
            lines.append(
                f"{target}: over {rep.k} repeats pass@{rep.k} {rep.pass_at_k:.2f}, pass^{rep.k} "
                f"{rep.pass_hat_k:.2f}, {rep.flip_rate or 0:.0%} of items changed outcome"
            )
    pair = result.paired
    if pair:
        s = pair.strict
        lines.append(
            f"{pair.first} vs {pair.second} (strict, McNemar over {s.items} items: {s.only_first} only the first, "
            f"{s.only_second} only the second, p={s.p:.3f}): {s.verdict}"
        )
    return lines


def repo_section(out: Section, result: RepoRun) -> None:
    traps = sorted({trap for t in result.targets.values() for trap in t.traps})
    rows = []
    for target, t in result.targets.items():
        res = t.resolved
        rows.append([target, proportion_text(res.k, res.n, res.low, res.high), fmt(_pct(t.visible_pass_rate)),
                     fmt(_pct(t.hidden_pass_rate)), fmt(_pct(t.gap)), str(t.tampered),
                     *(f"{t.traps.get(trap, 0)}/{t.attempts}" for trap in traps)])  # fmt: skip
        out.verdicts.append(
            f"{target}: repo repair {res.k}/{res.n} resolved; visible tests {fmt(_pct(t.visible_pass_rate))}, "
            f"hidden {fmt(_pct(t.hidden_pass_rate))}"
            + (f"; {t.tampered} attempt(s) graded tampered" if t.tampered else "")
        )
        out.problems += [f"{target}: {e}" for e in t.errors]
    headers = ["target", "resolved", "visible tests", "hidden tests", "gap", "tampered", *traps]
    note = "traps: attempts that passed every test probing the trap"
    out.tables.append(Table(f"Repo repair: {result.task}", headers, rows, note=note))
