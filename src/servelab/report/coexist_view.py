"""A coexist run as a section: per condition, the probe's chunk intervals and what a listener heard, and the
answer to "does the LLM load make the voice stutter" beside the probe alone."""

from __future__ import annotations

from collections.abc import Mapping

from servelab.core.results import CoexistRun, ConditionFigures
from servelab.report.model import Section, Table, fmt


def sharing_text(sharing: Mapping[str, object]) -> str:
    """``mps (LLM capped at 85% of SMs)`` and the like, for titles and tables."""
    text = str(sharing.get("mode", "?"))
    if "llm_active_thread_pct" in sharing:
        text += f" (LLM capped at {sharing['llm_active_thread_pct']}% of SMs)"
    if "probe_sms" in sharing:
        text += f" (probe in a green context of {sharing['probe_sms']} SMs)"
    return text


def coexist_section(out: Section, result: CoexistRun) -> None:
    listeners = [lf.lookahead_ms for lf in result.conditions[0].listeners] if result.conditions else []
    headers = ["condition", "chunks", "TTFA\np50 ms", "gap\np50 ms", "gap p99\nms [95%]", "gap\nmax ms", "pace\nRTF"]
    headers += [f"stalls\n@{la:g} ms" for la in listeners]
    rows = [_row(c) for c in result.conditions]
    caption = f"Probe {result.probe.get('probe')}, GPU sharing: {sharing_text(result.sharing)}"
    note = (
        "gap: the interval between the realtime stream's chunks; stalls @N ms: the underruns a listener with N ms of "
        "lookahead hears (and their stall ms)"
    )
    out.tables.append(Table(caption, headers, rows, note=note))
    out.verdicts += verdicts(result)
    out.problems += result.warnings


def _row(c: ConditionFigures) -> list[str]:
    p99 = f"{fmt(c.interval_p99_ms)}\n[{fmt(c.interval_p99_low_ms)}, {fmt(c.interval_p99_high_ms)}]"
    row = [c.condition, str(c.chunks), fmt(c.ttfa_p50_ms), fmt(c.interval_p50_ms, 2), p99]
    row += [fmt(c.interval_max_ms), fmt(c.pace_rtf, 2)]
    return row + [f"{lf.underruns} ({fmt(lf.stall_ms, 0)})" for lf in c.listeners]


def verdicts(result: CoexistRun) -> list[str]:
    alone = next((c for c in result.conditions if c.condition == "alone"), None)
    lines = []
    for c in result.conditions:
        if c.condition == "alone" or alone is None or c.interval_p99_ms is None:
            continue
        llm = c.llm
        failed = {k: n for k, n in (llm.failures if llm else {}).items() if k != "cancelled"}
        if llm is not None and failed and llm.ok == 0:
            lines.append(f"beside {c.condition}: no answer: every LLM request failed ({', '.join(failed)}), so the "
                         "probe ran beside nothing")  # fmt: skip
            continue
        worst = min(c.listeners, key=lambda lf: lf.lookahead_ms, default=None)
        under = f", {worst.underruns} underruns without lookahead" if worst else ""
        lines.append(
            f"beside {c.condition}: chunk p99 {fmt(c.interval_p99_ms)} ms (alone {fmt(alone.interval_p99_ms)}), "
            f"RTF {fmt(c.pace_rtf, 2)} (alone {fmt(alone.pace_rtf, 2)}){under}"
        )
    return lines
