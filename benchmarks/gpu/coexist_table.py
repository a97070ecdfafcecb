"""The coexist figures of stored runs as one markdown table, recomputed from the stored utterances and LLM records,
plus one chunk-interval plot per run. With --reference STORE, that store's first coexist run (the plain server) is
what every other run is judged against: each probe alone and each LLM load alone come from it, so a mitigation
that is a server of its own (smaller batches, an MPS cap) shows its cost instead of hiding it in its own baselines.

usage: python coexist_table.py OUT_DIR [--reference RUNS.sqlite] RUNS.sqlite...   (prints the table)"""

from __future__ import annotations

import sys
from pathlib import Path

from servelab.coexist import CoexistResult, mitigation_lines, rebase, stored_result
from servelab.core.results import ConditionFigures
from servelab.core.store import RunStore
from servelab.report import plot_intervals

HEADERS = [
    "configuration", "condition (probe)", "TTFA p50 / p95 (ms)", "lateness p99 (ms)", "pace RTF",
    "underruns @300 ms", "lowest fps", "LLM tok/s", "LLM kept: out / prompt", "LLM TTFT p50 (alone) ms", "meets",
]  # fmt: skip


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def _pct(share: float | None) -> str:
    return "—" if share is None else f"{share:.0%}"


def runs(path: str) -> list[CoexistResult]:
    with RunStore(path) as db:
        return [stored_result(db, info.run_id) for info in db.list_runs() if info.kind == "coexist"]


def row(label: str, c: ConditionFigures) -> list[str]:
    name = f"{c.condition} ({c.probe})" if c.probe else c.condition
    heard = next((str(lf.underruns) for lf in c.listeners if lf.lookahead_ms == 300.0), "—")
    cells = [label, name, f"{_f(c.ttfa_p50_ms)} / {_f(c.ttfa_p95_ms)}", _f(c.lateness_p99_ms), _f(c.pace_rtf, 2)]
    cells += [heard, _f(c.min_fps)]
    if c.llm is None:
        cells += ["—", "—", "—"]
    else:
        kept = f"**{_pct(c.llm.tok_s_share)}**: {_pct(c.llm.output_share)} / {_pct(c.llm.prompt_share)}"
        tok_s = f"{_f(c.llm.streamed_tok_s, 0)} out, {_f(c.llm.prompt_tok_s, 0)} prompt"
        cells += [tok_s, kept, f"{_f(c.llm.ttft_ms.get('p50'), 0)} ({_f(c.llm.ttft_p50_alone_ms, 0)})"]
    cells.append("—" if c.meets is None else ("yes" if c.meets else "**no**"))
    return cells


def main(out: Path, args: list[str]) -> None:
    reference = None
    if args[:1] == ["--reference"]:
        reference, args = runs(args[1])[0], args[2:]
    results = ([reference] if reference else []) + [r for path in args for r in runs(path)]
    print("| " + " | ".join(HEADERS) + " |")
    print("|" + "---|" * len(HEADERS))
    lines = []
    for result in results:
        if reference is not None and result is not reference:
            result = rebase(result, reference)
        label = str(result.sharing.get("label", result.run_id))
        plot_intervals(result, out / f"coexist-{label}.png")
        for c in result.conditions:
            print("| " + " | ".join(row(label, c)) + " |")
        plain = "the plain server" if result is reference or reference is None else f"{label} (its own server)"
        lines += [f"- {label}: {line.replace('no mitigation', plain)}" for line in mitigation_lines(result.conditions)]
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
