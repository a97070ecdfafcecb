"""The answer tables: the questions of the seed articles, in their shapes, for whatever the report's runs hold.

Configuration (what was measured), fit (a budget bar: weights, overhead, KV, co-tenants, free; sessions at the
context), speed side by side (task | target A | target B, a difference named only where it lies outside the
noise), capability by axis (strict and semantic side by side), coexist by layer (alone, decode, prefill, all). Each
headline number carries its n; a figure its samples cannot support says so instead (:mod:`servelab.report.model`).
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.coexist import kept_text
from servelab.core.results import BenchRun, Cell, CoexistRun, ConditionFigures, EvalRun, PlanRun, RepoRun, Row
from servelab.report.model import Section, Table, can_differ, fmt, tail

GIB = 2**30
OVERLAP = 1.2  # an aggregate above this many times one stream's speed: streams overlapped, the aggregate is news


def answer_tables(sections: Sequence[Section]) -> list[Table]:
    results = [s.result for s in sections if s.result is not None]
    tables = [t for t in [configuration(sections)] if t is not None]
    tables += [fit(r) for r in results if isinstance(r, PlanRun)]
    tables += [speed(r) for r in results if isinstance(r, BenchRun) and r.rows]
    evals = [r for r in results if isinstance(r, EvalRun | RepoRun)]
    tables += [capability(evals)] if evals else []
    tables += [layers(r) for r in results if isinstance(r, CoexistRun) and any(c.probe for c in r.conditions)]
    return tables


# ---- configuration ----------------------------------------------------------------------------------------------
def configuration(sections: Sequence[Section]) -> Table | None:
    """One column per target, as first described by a run's manifest: model, address, engine build; the host."""
    seen: dict[str, dict[str, object]] = {}
    hardware = ""
    for s in sections:
        targets = s.manifest.get("targets")
        for name, t in (targets if isinstance(targets, dict) else {}).items():
            if isinstance(t, dict):
                seen.setdefault(str(name), t)
                hardware = hardware or dict(s.facts).get("hardware", "")
    if not seen:
        return None
    rows = [["model", *(_model(t) for t in seen.values())]]
    rows.append(["address", *(str(t.get("url", "?")) for t in seen.values())])
    rows.append(["engine", *(_build(t) for t in seen.values())])
    if hardware:
        rows.append(["host", hardware, *([""] * (len(seen) - 1))])
    return Table("Configuration", ["item", *seen], rows)


def _model(t: dict[str, object]) -> str:
    models = t.get("models")
    ids = [m.get("id") for m in models if isinstance(m, dict)] if isinstance(models, list) else []
    return str(ids[0]) if ids else str(t.get("models_error", "?"))


def _build(t: dict[str, object]) -> str:
    if t.get("server_version"):
        return f"vLLM {t['server_version']}"
    return str(t.get("server_header") or "not stated")


# ---- fit --------------------------------------------------------------------------------------------------------
def fit(result: PlanRun) -> Table:
    """The memory budget as parts of the device's memory, and the sessions the KV pool holds at the context."""
    plan = result.plan
    extra = plan.model_extra or {}
    total = float(extra.get("gpu_bytes") or 0)
    parts = [
        ("weights", float(plan.weights.bytes)),
        ("engine overhead", float(extra.get("overhead_bytes") or 0)),
        ("KV cache", float(plan.kv_pool_bytes)),
        ("co-tenants", float(extra.get("cotenant_bytes") or 0)),
    ]
    used = sum(b for _, b in parts)
    parts.append(("free" if used <= total else "over by", abs(total - used)))
    shown = [(name, b) for name, b in parts if b or name == "KV cache"]
    rows = [[name, f"{b / GIB:,.2f} GiB", f"{b / total:.0%}" if total else "-"] for name, b in shown]
    rows.append(["sessions at the context", fmt(plan.capacity.max_sequences, 2), f"{plan.capacity.tokens:,} tokens"])
    whole = max(total, used)  # over budget: the bar is what was asked for, the device a part of it
    bar = [(name, b / whole) for name, b in parts if whole and b > 0 and name != "over by"]
    where = "the embedded CPU engine" if plan.engine == "vllm-cpu" else plan.gpu
    caption = f"Fit: {plan.model} on {where} ({total / GIB:,.1f} GiB)" if total else f"Fit: {plan.model} on {where}"
    return Table(caption, ["part", "memory", "share"], rows, note="computed by the planner, not measured", bar=bar)


# ---- speed ------------------------------------------------------------------------------------------------------
SPEED_NOTE = (
    "medians over the ok requests (n); TTFT: sent -> first token; aggregate shown where streams overlapped; "
    "difference: where the two lie outside the noise (Mann-Whitney U, p < 0.05), else 'within the noise'; too few "
    "to tell: no difference could reach p < 0.05 with so few requests"
)


def speed(result: BenchRun) -> Table:
    """Seed 000's speed table: task | A | B: per-stream tok/s and TTFT, each cell with its n."""
    targets = list(dict.fromkeys(t for row in result.rows for t in row.cells))
    headers = ["task", *targets] + (["difference"] if len(targets) == 2 else [])
    rows = []
    for row in result.rows:
        cells = [row.scenario, *(_speed_cell(row.cells.get(t)) for t in targets)]
        if len(targets) == 2:
            cells.append(_difference(row, targets[0], targets[1]))
        rows.append(cells)
    return Table("Speed: tok/s per stream and TTFT", headers, rows, note=SPEED_NOTE)


def _speed_cell(c: Cell | None) -> str:
    if c is None:
        return "-"
    if c.tok_s is None or c.ttft_ms is None:
        return f"no ok request ({c.n - c.ok} of {c.n} failed)"
    text = f"{fmt(c.tok_s.estimate)} tok/s\nTTFT {fmt(c.ttft_ms.estimate, 0)} ms"
    if c.aggregate_tok_s > OVERLAP * c.tok_s.estimate:
        text += f"\n{fmt(c.aggregate_tok_s)} tok/s aggregate"
    failed = f", {c.n - c.ok} FAILED" if c.ok < c.n else ""
    return f"{text}\nn={c.ok}{failed}"


def _difference(row: Row, a: str, b: str) -> str:
    ca, cb = row.cells.get(a), row.cells.get(b)
    if ca is None or cb is None or not (ca.tok_s and cb.tok_s and ca.ttft_ms and cb.ttft_ms):
        return "-"
    if not can_differ(ca.ok, cb.ok):
        return f"too few to tell\n(n={ca.ok} and {cb.ok})"
    said = []
    if row.differs.get("tok_s") and ca.tok_s.estimate:
        said.append(f"{b} x{cb.tok_s.estimate / ca.tok_s.estimate:.2f} tok/s")
    if row.differs.get("ttft_ms"):
        said.append(f"{b} TTFT {cb.ttft_ms.estimate - ca.ttft_ms.estimate:+,.0f} ms")
    return "\n".join(said) or "within the noise"


# ---- capability -------------------------------------------------------------------------------------------------
def capability(results: Sequence[EvalRun | RepoRun]) -> Table:
    """Seed 000's capability table by axis: per target the strict and the semantic k/n side by side; repo repair
    as resolved (hidden tests included)."""
    targets = list(dict.fromkeys(t for r in results for t in r.targets))
    cells: dict[str, dict[str, str]] = {}
    for r in results:
        if isinstance(r, EvalRun):
            for t, data in r.targets.items():
                for suite, acc in data.suites.items():
                    both = f"{acc.strict.k}/{acc.strict.n} · {acc.semantic.k}/{acc.semantic.n}"
                    cells.setdefault(suite, {})[t] = both
        else:
            for t, repo in r.targets.items():
                res = repo.resolved
                cells.setdefault(f"repo repair: {r.task} (hidden tests incl.)", {})[t] = f"{res.k}/{res.n} resolved"
    rows = [[axis, *(by.get(t, "-") for t in targets)] for axis, by in cells.items()]
    headers = ["axis", *(f"{t}\nstrict · semantic" for t in targets)]
    note = "k/n items; strict: the exact format asked for; semantic: the right answer in any format"
    return Table("Capability by axis", headers, rows, note=note)


# ---- coexist ----------------------------------------------------------------------------------------------------
def layers(result: CoexistRun) -> Table:
    """The voice by layer (alone, beside decode, prefill, all): its p99 lateness with its n, underruns at the goal's
    lookahead, the LLM's kept share and the goals' verdict; an avatar probe's lowest fps where one ran."""
    voice = next(c.probe for c in result.conditions if c.probe)
    lookahead = result.goals.get("lookahead", 300.0)
    avatar = {c.condition: c for c in result.conditions if c.probe and c.probe != voice and c.min_fps is not None}
    headers = ["layer", "voice late\np99 ms", f"stalls\n@{lookahead:g} ms", "LLM\nkept", "goals"]
    headers += ["avatar\nlowest fps"] if avatar else []
    rows = []
    for c in result.conditions:
        if c.probe != voice:
            continue
        row = [c.condition, f"{tail(c.lateness_p99_ms, c.chunks)}\nn={c.chunks}", _underruns(c, lookahead)]
        row += [_kept(c), {True: "met", False: "missed", None: "-"}[c.meets]]
        if avatar:
            row.append(fmt(avatar[c.condition].min_fps, 1) if c.condition in avatar else "-")
        rows.append(row)
    note = (
        "late: a chunk's arrival after an unbroken playback from when its utterance was due needed it (n: chunks; "
        "too few: under 100, no p99); stalls: the underruns a listener with that lookahead hears; LLM kept: its "
        "token rate against the same load with no probe (n: its requests)"
    )
    return Table(f"Beside the LLM, by layer ({voice})", headers, rows, note=note)


def _underruns(c: ConditionFigures, lookahead: float) -> str:
    heard = next((lf for lf in c.listeners if lf.lookahead_ms == lookahead), None)
    return "-" if heard is None else str(heard.underruns)


def _kept(c: ConditionFigures) -> str:
    if c.llm is None or c.llm.tok_s_share is None:
        return "-"
    return f"{kept_text(c.llm)}\nn={c.llm.ok}"  # a share as shares are printed: never above 100% as a fact
