"""The coexist figures of stored runs as one markdown table, recomputed from the stored utterances, plus one
chunk-interval plot per run. usage: python coexist_table.py OUT_DIR RUNS.sqlite...  (prints the table)"""

from __future__ import annotations

import sys
from pathlib import Path

from servelab.coexist import stored_result
from servelab.core.store import RunStore
from servelab.report import plot_intervals


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def main(out: Path, stores: list[str]) -> None:
    print(
        "| configuration | condition | chunks | TTFA p50 (ms) | interval p50 / p99 [95% CI] / max (ms) "
        "| pace RTF | RTF from schedule | underruns @0 / 300 ms | LLM requests finished of sent (TTFT p50 ms) "
        "| LLM kept | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in stores:
        with RunStore(path) as db:
            for info in db.list_runs():
                if info.kind != "coexist":
                    continue
                result = stored_result(db, info.run_id)
                label = result.sharing.get("label", info.run_id)
                plot_intervals(result, out / f"coexist-{label}.png")
                for c in result.conditions:
                    p99 = f"{_f(c.interval_p99_ms)} [{_f(c.interval_p99_low_ms)}, {_f(c.interval_p99_high_ms)}]"
                    under = " / ".join(str(lf.underruns) for lf in c.listeners if lf.lookahead_ms in (0.0, 300.0))
                    ttft = c.llm.ttft_ms.get("p50") if c.llm else None
                    llm = f"{c.llm.ok} of {c.llm.requests} ({_f(ttft, 0)})" if c.llm else "—"
                    kept = f"{c.llm.tok_s_share:.0%}" if c.llm and c.llm.tok_s_share is not None else "—"
                    name = f"{c.condition} ({c.probe})" if c.probe and "probes" in result.probe else c.condition
                    cells = [label, name, str(c.chunks), _f(c.ttfa_p50_ms)]
                    cells += [f"{_f(c.interval_p50_ms, 2)} / {p99} / {_f(c.interval_max_ms)}", _f(c.pace_rtf, 2)]
                    cells += [_f(c.rtf_mean, 2), under, llm, kept, c.verdict or "—"]
                    print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
