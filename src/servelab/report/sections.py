"""One report section per stored run, by its kind: the seed-style tables side by side, the plots, the verdict
lines a person wants, and what failed."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from servelab.core.records import RequestRecord
from servelab.core.store import RunInfo, RunStore
from servelab.core.summary import inter_chunk_gaps_ms, ttft_ms
from servelab.report import plots
from servelab.report.model import Plot, Section, Table, fmt

MANIFEST_KEYS = ("servelab_version", "kind", "created_at", "host", "gpus", "targets", "args", "sharing")


def section(store: RunStore, info: RunInfo) -> Section:
    out = Section(info.run_id, info.kind, f"{info.kind} {info.run_id}", info.status, _manifest(info.manifest))
    if info.status != "complete":
        out.problems.append(f"the run ended {info.status}: what is below is what was measured before that")
    summaries = store.summaries(info.run_id)
    builder = BUILDERS.get(info.kind, _generic)
    builder(out, store, info, summaries)
    return out


def _manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    keep = {k: manifest[k] for k in MANIFEST_KEYS if k in manifest}
    return keep or manifest


def _add_plot(out: Section, caption: str, png: bytes | None) -> None:
    if png:
        out.plots.append(Plot(caption, png))


def _interval(cell: dict[str, Any] | None, digits: int = 1) -> str:
    if not cell:
        return "—"
    return f"{fmt(cell['estimate'], digits)} [{fmt(cell['low'], digits)}, {fmt(cell['high'], digits)}]"


# ---- bench and check ---------------------------------------------------------------------------------------
def _bench(out: Section, store: RunStore, info: RunInfo, summaries: dict[str, Any]) -> None:
    records = store.records(info.run_id)
    rows = summaries.get("compare", {}).get("rows", [])
    if rows:
        out.tables.append(_compare_table(rows))
    out.problems += summaries.get("compare", {}).get("warnings", [])
    _latency_plots(out, records)
    _concurrency_plot(out, summaries)
    _slo(out, summaries)
    _metrics(out, summaries)
    _bench_verdicts(out, rows, summaries)


def _compare_table(rows: list[dict[str, Any]]) -> Table:
    targets = list(dict.fromkeys(t for r in rows for t in r["targets"]))
    headers = ["scenario"]
    for t in targets:
        headers += [f"{t} tok/s per stream", f"{t} TTFT ms", f"{t} aggregate tok/s", f"{t} ok/n"]
    body = []
    for r in rows:
        line = [r["scenario"]]
        for t in targets:
            c = r["targets"].get(t)
            if c is None:
                line += ["—"] * 4
                continue
            differs = r.get("differs", {})
            line += [
                _interval(c["tok_s"]) + _star(differs, "tok_s"),
                _interval(c["ttft_ms"]) + _star(differs, "ttft_ms"),
            ]
            line += [fmt(c["aggregate_tok_s"]), f"{c['ok']}/{c['n']}"]
        body.append(line)
    caption = "Side by side: medians with 95% intervals; * the first two targets differ (Mann-Whitney p < 0.05)"
    return Table(caption, headers, body)


def _star(differs: dict[str, bool], key: str) -> str:
    return " *" if differs.get(key) else ""


def _latency_plots(out: Section, records: list[RequestRecord]) -> None:
    ttfts: dict[str, list[float]] = defaultdict(list)
    gaps: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if not r.ok:
            continue
        if (t := ttft_ms(r)) is not None:
            ttfts[f"{r.target}/{r.scenario}"].append(t)
        gaps[r.target] += inter_chunk_gaps_ms(r)
    _add_plot(out, "Time to first token", plots.survival(ttfts, "TTFT (ms)", "TTFT by target and scenario"))
    _add_plot(out, "Inter-chunk gaps", plots.survival(gaps, "gap between chunks (ms)", "Inter-chunk gaps by target"))


def _concurrency_plot(out: Section, summaries: dict[str, Any]) -> None:
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for name, s in summaries.items():
        m = re.fullmatch(r"([^/]+)/(.+)@c(\d+)", name)
        if m and isinstance(s.get("aggregate_tok_s"), int | float):
            points[f"{m[1]}/{m[2]}"].append((float(m[3]), float(s["aggregate_tok_s"])))
    title = "Throughput against concurrency"
    _add_plot(out, title, plots.lines(points, "concurrent streams", "aggregate tok/s", title))


def _slo(out: Section, summaries: dict[str, Any]) -> None:
    curves: dict[str, list[tuple[float, float]]] = {}
    for name, s in summaries.items():
        if not name.startswith("slo/"):
            continue
        target = name.removeprefix("slo/")
        curves[target] = [(float(level), 100 * float(att)) for level, att, _ in s.get("tried", [])]
        out.verdicts.append(f"{target}: highest {s.get('over', 'level')} within the SLO: {fmt(s.get('best'), 2)}")
    over = next((s.get("over", "level") for n, s in summaries.items() if n.startswith("slo/")), "level")
    _add_plot(out, "SLO search", plots.lines(curves, over, "% of requests within the SLO", "SLO attainment"))


def _metrics(out: Section, summaries: dict[str, Any]) -> None:
    for name, s in summaries.items():
        if not name.startswith("metrics/"):
            continue
        target = name.removeprefix("metrics/")
        series = {k: [(float(t), float(v)) for t, v in pts] for k, pts in (s.get("series") or {}).items() if pts}
        queue = {k: v for k, v in series.items() if k in ("running", "waiting")}
        kv = {k: [(t, 100 * v) for t, v in pts] for k, pts in series.items() if k == "kv_usage"}
        _add_plot(out, f"{target}: requests running and waiting", plots.lines(queue, "s", "requests", "/metrics queue"))
        _add_plot(out, f"{target}: KV cache usage", plots.lines(kv, "s", "% of the KV cache", "/metrics KV usage"))
        derived = s.get("derived") or {}
        if derived.get("spec_warning"):
            out.verdicts.append(f"{target}: {derived['spec_warning']}")
        elif derived.get("spec_acceptance_rate") is not None:
            rate, length = derived["spec_acceptance_rate"], derived.get("spec_mean_accepted_length")
            out.verdicts.append(f"{target}: draft acceptance {rate:.2f}, mean accepted length {fmt(length, 2)}")


def _bench_verdicts(out: Section, rows: list[dict[str, Any]], summaries: dict[str, Any]) -> None:
    for r in rows:
        cells = {t: c for t, c in r["targets"].items() if c.get("tok_s")}
        if len(cells) == 1:
            ((t, c),) = cells.items()
            out.verdicts.append(
                f"{r['scenario']} on {t}: {fmt(c['tok_s']['estimate'])} tok/s per stream, "
                f"TTFT {fmt((c.get('ttft_ms') or {}).get('estimate'), 0)} ms (medians)"
            )
        if len(cells) >= 2:
            (a, ca), (b, cb) = list(cells.items())[:2]
            ratio = ca["tok_s"]["estimate"] / cb["tok_s"]["estimate"] if cb["tok_s"]["estimate"] else None
            sig = "" if r.get("differs", {}).get("tok_s") else " (not a significant difference)"
            out.verdicts.append(f"{r['scenario']}: {a} streams at {fmt(ratio, 2)}x the speed of {b}{sig}")
        for t, c in r["targets"].items():
            if c["ok"] < c["n"]:
                out.verdicts.append(f"{r['scenario']} on {t}: {c['n'] - c['ok']} of {c['n']} requests failed")


def _check(out: Section, store: RunStore, info: RunInfo, summaries: dict[str, Any]) -> None:
    levels = sorted((int(n[1:]), s) for n, s in summaries.items() if re.fullmatch(r"x\d+", n))
    headers = ["streams", "TTFT p50 ms", "TTFT p99 ms", "gap p50 ms", "gap p99 ms", "tok/s per stream p50", "aggregate"]
    rows = [
        [str(n), fmt(s["ttft_ms"].get("p50")), fmt(s["ttft_ms"].get("p99")), fmt(s["itl_ms"].get("p50")),
         fmt(s["itl_ms"].get("p99")), fmt(s["stream_tok_s"].get("p50")), fmt(s["aggregate_tok_s"])]
        for n, s in levels
    ]  # fmt: skip
    if rows:
        out.tables.append(Table("Streamed requests at 1 and 4 concurrent streams", headers, rows))
    _latency_plots(out, store.records(info.run_id))


# ---- eval --------------------------------------------------------------------------------------------------
def _eval(out: Section, store: RunStore, info: RunInfo, summaries: dict[str, Any]) -> None:
    summary = summaries.get("eval/summary", {})
    targets = summary.get("targets", {})
    outcomes = ("correct", "format_violation", "wrong", "error", "timeout")
    rows, counts = [], {}
    for target, t in targets.items():
        for suite, acc in {"all": t["all"], **t.get("suites", {})}.items():
            o = acc["outcomes"]
            strict, semantic = acc["strict"], acc["semantic"]
            rows.append(
                [target, suite, str(acc["n"]), *(str(o.get(k, 0)) for k in outcomes), _rate(strict), _rate(semantic)]
            )
        counts[target] = {k: float(t["all"]["outcomes"].get(k, 0)) for k in outcomes}
        o = t["all"]["outcomes"]
        out.verdicts.append(
            f"{target}: {o.get('correct', 0)} correct, {o.get('format_violation', 0)} format violations, "
            f"{o.get('wrong', 0)} wrong, {o.get('timeout', 0)} timeouts of {t['all']['n']}"
        )
    if rows:
        headers = ["target", "suite", "n", *outcomes, "strict [95%]", "semantic [95%]"]
        out.tables.append(Table("Outcomes: strict format and semantics kept apart", headers, rows))
    _add_plot(out, "Outcomes by target", plots.bars(counts, "replies", "Outcomes"))
    out.problems += summary.get("warnings", [])
    if "repo/summary" in summaries:
        _repo(out, summaries["repo/summary"])


def _rate(channel: dict[str, Any]) -> str:
    if channel.get("rate") is None:
        return "—"
    return f"{channel['rate']:.0%} [{channel['low']:.0%}, {channel['high']:.0%}]"


def _repo(out: Section, repo: dict[str, Any]) -> None:
    targets = repo.get("targets", {})
    traps = sorted({trap for t in targets.values() for trap in t.get("traps", {})})
    rows = []
    for target, t in targets.items():
        res = t["resolved"]
        rows.append([target, f"{res['k']}/{res['n']}", fmt(t["visible_pass_rate"], 2), fmt(t["hidden_pass_rate"], 2)]
                    + [f"{t['traps'].get(trap, 0)}/{t['attempts']}" for trap in traps])  # fmt: skip
        tampered = t.get("tampered", 0)  # runs stored before the canaries have no count
        out.verdicts.append(
            f"{target}: repo repair {res['k']}/{res['n']} resolved; visible tests {fmt(t['visible_pass_rate'], 2)}, "
            f"hidden {fmt(t['hidden_pass_rate'], 2)}" + (f"; {tampered} attempt(s) graded tampered" if tampered else "")
        )
    headers = ["target", "resolved", "visible pass", "hidden pass", *traps]
    out.tables.append(Table(f"Repo repair ({repo.get('task')}): the per-trap matrix", headers, rows))


# ---- coexist -----------------------------------------------------------------------------------------------
def _coexist(out: Section, store: RunStore, info: RunInfo, summaries: dict[str, Any]) -> None:
    from servelab.coexist import stored_result
    from servelab.report.coexist_plots import interval_png, sharing_text

    result = stored_result(store, info.run_id)
    listeners = [lf.lookahead_ms for lf in result.conditions[0].listeners] if result.conditions else []
    headers = ["condition", "chunks", "TTFA p50 ms", "interval p50 ms", "p99 [95%] ms", "max ms", "pace RTF"]
    headers += [f"underruns @{la:g} ms" for la in listeners]
    rows = []
    for c in result.conditions:
        p99 = f"{fmt(c.interval_p99_ms)} [{fmt(c.interval_p99_low_ms)}, {fmt(c.interval_p99_high_ms)}]"
        row = [c.condition, str(c.chunks), fmt(c.ttfa_p50_ms), fmt(c.interval_p50_ms, 2), p99]
        rows.append([*row, fmt(c.interval_max_ms), fmt(c.pace_rtf, 2), *(str(lf.underruns) for lf in c.listeners)])
    caption = f"Probe {result.probe.get('probe')}, GPU sharing: {sharing_text(result.sharing)}"
    out.tables.append(Table(caption, headers, rows))
    _add_plot(out, "Chunk intervals per condition", interval_png(result))
    alone = next((c for c in result.conditions if c.condition == "alone"), None)
    for c in result.conditions:
        if c.condition == "alone" or alone is None or c.interval_p99_ms is None:
            continue
        worst = max(c.listeners, key=lambda lf: -lf.lookahead_ms, default=None)
        under = f", {worst.underruns} underruns without lookahead" if worst else ""
        out.verdicts.append(
            f"beside {c.condition}: chunk p99 {fmt(c.interval_p99_ms)} ms (alone {fmt(alone.interval_p99_ms)}), "
            f"RTF {fmt(c.pace_rtf, 2)} (alone {fmt(alone.pace_rtf, 2)}){under}"
        )
    out.problems += result.warnings + ([result.failed] if result.failed else [])


def _plan(out: Section, store: RunStore, info: RunInfo, summaries: dict[str, Any]) -> None:
    plan = summaries.get("plan")
    if not plan:
        return
    gib = 2**30
    cap = plan.get("capacity") or {}
    rows = [
        ["model", str(plan.get("model"))],
        ["GPU", str(plan.get("gpu"))],
        ["engine", str(plan.get("engine"))],
        ["weights (GiB)", fmt(plan.get("weights", {}).get("gib"), 2)],
        ["KV memory (GiB)", fmt(plan.get("kv_pool_bytes", 0) / gib, 2)],
        ["KV cache size (tokens)", fmt(cap.get("tokens"))],
        ["sessions at the full context", fmt(cap.get("max_sequences"), 2)],
        ["gpu_memory_utilization", fmt(plan.get("util_chosen"), 2)],
        ["command", str(plan.get("command"))],
    ]
    out.tables.append(Table("Will it fit", ["figure", "value"], rows))
    out.verdicts.append(str(plan.get("verdict")))
    out.problems += [str(r) for r in plan.get("reasons", []) if not plan.get("fits")]


def _generic(out: Section, store: RunStore, info: RunInfo, summaries: dict[str, Any]) -> None:
    for name, s in itertools.islice(summaries.items(), 20):
        flat = [[k, fmt(v) if not isinstance(v, dict | list) else "…"] for k, v in s.items()]
        out.tables.append(Table(name, ["figure", "value"], flat))


BUILDERS: dict[str, Callable[[Section, RunStore, RunInfo, dict[str, Any]], None]] = {
    "bench": _bench,
    "bench-slo": _bench,
    "check-smoke": _check,
    "eval": _eval,
    "coexist": _coexist,
    "plan": _plan,
}
