"""A coexist run as a section: per condition, the probe's chunk intervals and what a listener heard, and the
answer to "does the LLM load make the voice stutter" beside the probe alone."""

from __future__ import annotations

from collections.abc import Mapping

from servelab.coexist import condition_figure, kept_text, mitigation_lines
from servelab.core.figures import pct_text
from servelab.core.results import CoexistRun, ConditionFigures, LlmFigures
from servelab.report.model import Section, Table, fmt, say


def sharing_text(sharing: Mapping[str, object]) -> str:
    """``mps (LLM capped at 85% of SMs)`` and the like, for titles and tables."""
    text = str(sharing.get("mode", "?"))
    if "llm_active_thread_pct" in sharing:
        text += f" (LLM capped at {sharing['llm_active_thread_pct']}% of SMs)"
    if "probe_sms" in sharing:
        text += f" (probe in a green context of {sharing['probe_sms']} SMs)"
    return text


def coexist_section(out: Section, result: CoexistRun) -> None:
    probed = [c for c in result.conditions if c.probe or c.utterances]
    listeners = next(([lf.lookahead_ms for lf in c.listeners] for c in probed if c.listeners), [])
    several = len({c.probe for c in probed}) > 1
    headers = ["condition", "chunks", "TTFA\np50 ms", "late\np99 ms", "gap\np50 ms", "gap p99\nms [95%]", "gap\nmax ms"]
    headers += ["pace\nRTF"]
    headers += [f"stalls\n@{la:g} ms" for la in listeners]
    rows = [_row(c, listeners, several) for c in probed]
    caption = f"Probe {result.probe.get('probe')}, GPU sharing: {sharing_text(result.sharing)}"
    if result.reference:
        caption += f"; judged against run {result.reference}'s baselines (each probe alone, each LLM load alone)"
    note = (
        "late: how much later a chunk arrived than an unbroken playback, started when its utterance was due, needs "
        "it. gap: the interval between the realtime stream's chunks. stalls: the underruns a listener with that "
        "much lookahead hears, and their stall ms. A p99 from fewer than 100 samples is shown as the largest "
        "sample with their count."
    )
    out.tables.append(Table(caption, headers, rows, note=note))
    if any(c.llm is not None for c in result.conditions):
        out.tables.append(llm_table(result.conditions))
    for line, evidence in judged(result):
        say(out, line, evidence)
    mitigations = mitigation_lines(result.conditions)
    for line in mitigations if len(mitigations) > 1 else []:  # one group: the conditions' own verdicts say it
        say(out, line)
    out.problems += result.warnings


LLM_NOTE = (
    "the LLM's own requests in each condition; tok/s: the tokens that streamed while the load ran, requests cut off "
    "at its end included; out / prompt: that and the prompt tokens taken in per second, over the same load's with no "
    "probe (llm:...); kept: the lower of the two; TTFT: of the finished requests and those cut off after their first "
    "token"
)


def llm_table(conditions: list[ConditionFigures]) -> Table:
    """The LLM's side of every condition: what it got, and the share of its throughput alone it kept."""
    rows = []
    for c in conditions:
        if c.llm is None:
            continue
        kept = kept_text(c.llm) if c.llm.tok_s_share is not None else "-"
        ttft = f"{fmt(c.llm.ttft_ms.get('p50'), 0)} ({fmt(c.llm.ttft_p50_alone_ms, 0)})"
        cut = f"\n+{c.llm.cut_off()} cut off" if c.llm.cut_off() else ""
        waiting = f" ({c.llm.cut_before_first_token} waiting)" if c.llm.cut_before_first_token else ""
        parts = f"{pct_text(c.llm.output_share)} / {pct_text(c.llm.prompt_share)}"
        done = f"{c.llm.ok}/{c.llm.requests - c.llm.cut_off()}{cut}{waiting}"
        rows.append([c.condition, done, fmt(_tok_s(c.llm), 0), parts, kept, ttft])
    headers = ["condition", "LLM ok/n", "LLM\ntok/s", "out / prompt\nkept", "kept", "TTFT p50 ms\n(alone)"]
    return Table("The LLM's side", headers, rows, note=LLM_NOTE)


def _tok_s(llm: LlmFigures) -> float:
    return llm.streamed_tok_s if llm.streamed_tok_s is not None else llm.aggregate_tok_s  # a run stored before it


def _row(c: ConditionFigures, lookaheads: list[float], several: bool = False) -> list[str]:
    gap = condition_figure(c, "interval", 0.99)
    p99 = gap.text()
    if gap.supported:
        p99 += f"\n[{fmt(c.interval_p99_low_ms)}, {fmt(c.interval_p99_high_ms)}]"
    name = f"{c.condition}\n{c.probe}" if several else c.condition
    late, ttfa = condition_figure(c, "lateness", 0.99).text(), condition_figure(c, "ttfa", 0.5).text()
    row = [name, str(c.chunks), ttfa, late, fmt(c.interval_p50_ms, 2), p99]
    row += [fmt(c.interval_max_ms), fmt(c.pace_rtf, 2)]
    heard = {lf.lookahead_ms: lf for lf in c.listeners}
    return row + [f"{lf.underruns} ({fmt(lf.stall_ms, 0)})" if (lf := heard.get(la)) else "-" for la in lookaheads]


def verdicts(result: CoexistRun) -> list[str]:
    return [line for line, _ in judged(result)]


def judged(result: CoexistRun) -> list[tuple[str, str]]:
    """Per condition with load, one short verdict (against the goals where they were judged) and its evidence:
    the chunk figures beside the probe alone's, and which goals held."""
    first = next((c.probe for c in result.conditions if c.probe), "")
    alone = next((c for c in result.conditions if c.condition == "alone" and c.probe == first), None)
    out = []
    for c in result.conditions:
        if c.condition == "alone" or c.condition.startswith("llm:") or (first and not c.probe):
            continue
        name = f"beside {c.condition}" if c.probe == first else f"{c.condition} ({c.probe})"
        llm = c.llm
        failed = {k: n for k, n in (llm.failures if llm else {}).items() if k != "cancelled"}
        if llm is not None and failed and llm.ok == 0:
            out.append((f"{name}: no answer: every LLM request failed ({', '.join(failed)}), so the probe ran beside "
                        "nothing", ""))  # fmt: skip
            continue
        figures = _figures(c, alone) if c.probe == first and alone is not None else ""
        evidence = "\n".join(x for x in (figures, c.verdict or "") if x)
        if c.meets is not None:
            out.append((f"{name}: {'meets' if c.meets else 'misses'} the goals", evidence))
        elif figures:
            out.append((f"{name}: not judged against goals", evidence))
    return out


def _figures(c: ConditionFigures, alone: ConditionFigures) -> str:
    worst = min(c.listeners, key=lambda lf: lf.lookahead_ms, default=None)
    under = f", {worst.underruns} underruns at {worst.lookahead_ms:g} ms lookahead" if worst else ""
    beside, by_itself = condition_figure(c, "interval", 0.99), condition_figure(alone, "interval", 0.99)
    return (
        f"chunk interval {beside.labelled(unit='ms')} (alone {by_itself.labelled()}), "
        f"RTF {fmt(c.pace_rtf, 2)} (alone {fmt(alone.pace_rtf, 2)}){under}"
    )
