"""On the GPU host: the seed-000 speed table (Laguna vs SmolLM2), seed-003's cold/warm 56K TTFT, and a
workload matched with `vllm bench serve` (benchmarks/gpu/prompts-matched.sharegpt.json). Library calls only
(PYTHONPATH=src), so it needs no CLI dependencies. Writes bench-seed.json and runs.sqlite to OUTDIR.

usage: python bench_seed.py seed OUTDIR LAGUNA_URL SMOLLM2_URL
       python bench_seed.py matched OUTDIR LAGUNA_URL LABEL [PROMPTS]   (one servelab pass: servelab-LABEL.json)
       python bench_seed.py agree OUTDIR                        (servelab-roundN.json beside vllm-roundN.json)

benchmarks/gpu/agree.sh alternates `vllm bench serve` and `matched` on a warmed engine.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from pathlib import Path

from servelab.bench import SLO, Load, expand, resolve_targets, run_bench, search_slo
from servelab.bench.compare import rows_to_dicts
from servelab.core.records import RequestRecord
from servelab.core.store import RunStore
from servelab.core.summary import inter_chunk_gaps_ms, output_tokens, tpot_ms, ttft_ms
from servelab.load.scenarios import load_scenario

HERE = Path(__file__).resolve().parent


def figures(records: list[RequestRecord]) -> dict[str, float]:
    """The figures `vllm bench serve` prints, by its definitions, from servelab's records."""
    ok = [r for r in records if r.ok]
    ttfts = [t for r in ok if (t := ttft_ms(r, content=True)) is not None]
    tpots = [t for r in ok if (t := tpot_ms(r)) is not None]
    itls = [g for r in ok for g in inter_chunk_gaps_ms(r)]
    start = min(r.sent_ns for r in ok if r.sent_ns is not None)
    end = max(r.end_ns for r in ok if r.end_ns is not None)
    duration = (end - start) / 1e9
    return {
        "completed": len(ok),
        "duration": duration,
        "output_throughput": sum(output_tokens(r) for r in ok) / duration,
        "mean_ttft_ms": statistics.fmean(ttfts),
        "median_ttft_ms": statistics.median(ttfts),
        "median_tpot_ms": statistics.median(tpots),
        "median_itl_ms": statistics.median(itls),
    }


def matched(out: Path, url: str, label: str, prompts: str | None = None) -> None:
    """One servelab pass over the matched prompts, byte-identical to `vllm bench serve`'s (no unique prefix,
    no warm-up: the caller alternates the two tools on an engine it has warmed)."""
    store = RunStore(out / "runs.sqlite")
    result = run_bench(
        store,
        resolve_targets([("laguna", url)]),
        [load_scenario(prompts or str(HERE / "prompts-matched.sharegpt.json"))],
        Load(
            requests=32,
            concurrency=4,
            max_tokens=256,
            warmup=0,
            unique_prefix=False,
            fixed_output=os.environ.get("FIXED_OUTPUT", "ignore_eos"),  # type: ignore[arg-type]
        ),
    )
    report: dict[str, object] = {"run_id": result.run_id, "figures": figures(result.records)}
    report["warnings"] = result.warnings
    report["prompt_tokens"] = sorted({r.prompt_tokens or 0 for r in result.records})
    (out / f"servelab-{label}.json").write_text(json.dumps(report, indent=1, default=str))
    print(label, json.dumps(report["figures"]), flush=True)


def rate(out: Path, url: str) -> None:
    """The highest Poisson request rate at which 90% of code-chat requests keep TTFT <= 200 ms and the mean gap
    between tokens <= 15 ms (errors count as failures): doubling from 1 req/s, then bisecting to 10%."""
    store = RunStore(out / "runs.sqlite")
    slo = SLO(ttft_ms=200, tpot_ms=15, attainment=0.9)
    result, found = search_slo(
        store,
        resolve_targets([("laguna", url)]),
        load_scenario("code-chat"),
        Load(requests=8, warmup=1),
        slo,
        limit=64.0,
        over="rate",
        start_rate=1.0,
    )
    search = found["laguna"]
    steps = []
    for level, attained, ok in search.tried:
        recs = [r for r in result.records if r.scenario == f"code-chat@r{level:g}"]
        ttfts = [t for r in recs if (t := ttft_ms(r)) is not None]
        lag = [(r.sent_ns - r.scheduled_ns) / 1e6 for r in recs if r.sent_ns and r.scheduled_ns]
        steps.append(
            {
                "rate": level,
                "attained": attained,
                "met": ok,
                "requests": len(recs),
                "errors": sum(not r.ok for r in recs),
                "ttft_p50_ms": statistics.median(ttfts) if ttfts else None,
                "tpot_p50_ms": statistics.median([t for r in recs if (t := tpot_ms(r)) is not None] or [0.0]),
                "schedule_lag_max_ms": max(lag, default=None),
            }
        )
    report: dict[str, object] = {"run_id": result.run_id, "slo": "ttft<=200ms, itl<=15ms, 90%", "steps": steps}
    report["best_rate"] = search.best
    report["warnings"] = result.warnings
    (out / "bench-rate-slo.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report, default=str)[:3000], flush=True)


KEYS = ("output_throughput", "median_ttft_ms", "mean_ttft_ms", "median_tpot_ms", "median_itl_ms", "duration")


def _histogram(text: str, name: str) -> tuple[float, float]:
    """(sum, count) of one vLLM histogram in a /metrics scrape, over all label sets."""
    total = count = 0.0
    for line in text.splitlines():
        m = re.match(rf"{name}_(sum|count)(?:{{[^}}]*}})? ([0-9.e+-]+)$", line)
        if m:
            total, count = (total + float(m[2]), count) if m[1] == "sum" else (total, count + float(m[2]))
    return total, count


def server_side(out: Path, tool: str, label: str) -> dict[str, float]:
    """The server's own mean TTFT, queue and prefill time (ms) over one pass: /metrics scraped before and after."""
    before, after = (out / f"metrics-{tool}-{label}-{w}.txt" for w in ("before", "after"))
    if not (before.exists() and after.exists()):
        return {}
    means = {}
    for key, name in SERVER_SERIES.items():
        (s0, c0), (s1, c1) = _histogram(before.read_text(), name), _histogram(after.read_text(), name)
        if c1 > c0:
            means[key] = 1000 * (s1 - s0) / (c1 - c0)
    return means


SERVER_SERIES = {
    "server_ttft_ms": "vllm:time_to_first_token_seconds",
    "server_queue_ms": "vllm:request_queue_time_seconds",
    "server_prefill_ms": "vllm:request_prefill_time_seconds",
}


def agree(out: Path) -> None:
    """Per round and averaged over rounds: servelab against `vllm bench serve` (vllm-LABEL.json), and the server's
    own view of each pass (from /metrics scraped around it) where agree.sh took it."""
    rounds = sorted(p.stem.removeprefix("servelab-") for p in out.glob("servelab-round*.json"))
    rows: dict[str, dict[str, list[float]]] = {k: {"vllm": [], "servelab": []} for k in KEYS}
    for label in rounds:
        ours = json.loads((out / f"servelab-{label}.json").read_text())["figures"]
        theirs = json.loads((out / f"vllm-{label}.json").read_text())
        for key in KEYS:
            rows[key]["vllm"].append(float(theirs[key]))
            rows[key]["servelab"].append(float(ours[key]))
        for key, value in server_side(out, "vllm", label).items():
            rows.setdefault(key, {"vllm": [], "servelab": []})["vllm"].append(value)
        for key, value in server_side(out, "servelab", label).items():
            rows.setdefault(key, {"vllm": [], "servelab": []})["servelab"].append(value)
    print("| figure | " + " | ".join(f"{r}: vllm / servelab" for r in rounds) + " | mean vllm | mean servelab | diff |")
    print("|---" * (len(rounds) + 4) + "|")
    for key, both in rows.items():
        if len(both["vllm"]) != len(rounds) or len(both["servelab"]) != len(rounds):
            continue
        cells = [f"{a:.2f} / {b:.2f}" for a, b in zip(both["vllm"], both["servelab"], strict=True)]
        mean_v, mean_s = statistics.fmean(both["vllm"]), statistics.fmean(both["servelab"])
        diff = 100 * (mean_s / mean_v - 1)
        print(f"| {key} | " + " | ".join(cells) + f" | {mean_v:.2f} | {mean_s:.2f} | {diff:+.2f}% |")


def seed(out: Path, laguna: str, smollm2: str) -> None:
    store = RunStore(out / "runs.sqlite")
    targets = resolve_targets([("laguna", laguna), ("smollm2", smollm2)])
    report: dict[str, object] = {}
    table = run_bench(store, targets, expand(["seed-000"]), Load(requests=5, warmup=1))
    report["seed_000"] = {
        "run_id": table.run_id,
        "rows": rows_to_dicts(table.rows),
        "metrics": table.metrics,
        "warnings": table.warnings,
    }
    print("seed-000 done", flush=True)
    prefix = run_bench(store, targets[:1], expand(["prefix-long"]), Load(requests=2, warmup=0, prefix_tokens=56000))
    report["prefix_56k"] = {
        "run_id": prefix.run_id,
        "records": [
            {
                "scenario": r.scenario,
                "prompt_tokens": r.prompt_tokens,
                "cached_tokens": r.cached_tokens,
                "ttft_ms": (r.first_token_ns - r.sent_ns) / 1e6 if r.first_token_ns and r.sent_ns else None,
                "error": r.error_detail,
            }
            for r in prefix.records
        ],
        "warnings": prefix.warnings,
    }
    (out / "bench-seed.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["prefix_56k"], default=str)[:2000], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "matched":
        matched(Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
    elif sys.argv[1] == "rate":
        rate(Path(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "agree":
        agree(Path(sys.argv[2]))
    else:
        seed(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
