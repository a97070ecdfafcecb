"""An eval run and a repo-repair run as sections: outcomes with strict and semantic accuracy kept apart, who is
better, and the replies that were not correct with what the model said."""

from __future__ import annotations

from servelab.core.figures import proportion_text
from servelab.core.results import Channel, EvalRun, Reply, RepoRun
from servelab.report import plots
from servelab.report.model import INTERVAL_MIN, Section, Table, add_plot, fmt, say

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
        note = f"k/n, with the 95% Wilson interval from {INTERVAL_MIN} items up; semantic = correct + format violations"
        out.tables.append(Table("Outcomes: strict format and semantics kept apart", headers, rows, note=note))
    for line, evidence in judged(result):
        say(out, line, evidence)
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
    return [line for line, _ in judged(result)]


def judged(result: EvalRun) -> list[tuple[str, str]]:
    """The lines a person wants, short: correct of all, violations against wrong answers (what else went wrong only
    where something did), and who is better; reliability over repeats and the test's figures as evidence."""
    lines = []
    for target, data in result.targets.items():
        c = data.all.outcomes
        text = (f"{target}: {c.get('correct', 0)}/{data.all.n} correct, {c.get('format_violation', 0)} format "
                f"violations, {c.get('wrong', 0)} wrong")  # fmt: skip
        text += "".join(f", {c[k]} {k}s" for k in ("error", "timeout") if c.get(k))
        rep = data.repeats
        evidence = ""
        if rep and rep.items and rep.pass_at_k is not None and rep.pass_hat_k is not None:
            evidence = (f"over {rep.k} repeats pass@{rep.k} {rep.pass_at_k:.2f}, pass^{rep.k} {rep.pass_hat_k:.2f}, "
                        f"{rep.flip_rate or 0:.0%} of items changed outcome")  # fmt: skip
        lines.append((text, evidence))
    pair = result.paired
    if pair:
        s = pair.strict
        lines.append((
            f"{pair.first} vs {pair.second} (strict): {s.verdict}",
            f"McNemar over {s.items} items: {s.only_first} only the first, {s.only_second} only the second, "
            f"p={s.p:.3f}",
        ))  # fmt: skip
    return lines


def repo_section(out: Section, result: RepoRun) -> None:
    traps = sorted({trap for t in result.targets.values() for trap in t.traps})
    rows = []
    for target, t in result.targets.items():
        res = t.resolved
        rows.append([target, proportion_text(res.k, res.n, res.low, res.high), fmt(_pct(t.visible_pass_rate)),
                     fmt(_pct(t.hidden_pass_rate)), fmt(_pct(t.gap)), str(t.tampered),
                     *(f"{t.traps.get(trap, 0)}/{t.attempts}" for trap in traps)])  # fmt: skip
        say(
            out,
            f"{target}: repo repair {res.k}/{res.n} resolved"
            + (f"; {t.tampered} attempt(s) graded tampered" if t.tampered else ""),
            f"visible tests {fmt(_pct(t.visible_pass_rate))}, hidden {fmt(_pct(t.hidden_pass_rate))}",
        )
        out.problems += [f"{target}: {e}" for e in t.errors]
    headers = ["target", "resolved", "visible tests", "hidden tests", "gap", "tampered", *traps]
    note = "traps: attempts that passed every test probing the trap"
    out.tables.append(Table(f"Repo repair: {result.task}", headers, rows, note=note))
