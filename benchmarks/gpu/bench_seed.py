"""On the GPU host: the seed-000 speed table (Laguna vs SmolLM2), seed-003's cold/warm 56K TTFT, and a
workload matched with `vllm bench serve` (benchmarks/gpu/prompts-matched.sharegpt.json). Library calls only
(PYTHONPATH=src), so it needs no CLI dependencies. Writes bench-seed.json and runs.sqlite to OUTDIR.

usage: python bench_seed.py PHASE OUTDIR LAGUNA_URL SMOLLM2_URL     (PHASE: matched or seed)

Run `matched` right after `vllm bench serve` on the same prompts: servelab heads each chat with a unique
system line, so its requests cannot hit the prefix cache vllm bench just filled (the reverse order would).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servelab.bench import Load, expand, resolve_targets, run_bench
from servelab.bench.compare import rows_to_dicts
from servelab.bench.scenarios import load_scenario
from servelab.core.store import RunStore
from servelab.core.summary import summarize

HERE = Path(__file__).resolve().parent


def matched(out: Path, laguna: str) -> None:
    store = RunStore(out / "runs.sqlite")
    targets = resolve_targets([("laguna", laguna)])
    result = run_bench(
        store,
        targets,
        [load_scenario(str(HERE / "prompts-matched.sharegpt.json"))],
        Load(requests=32, concurrency=4, max_tokens=256, warmup=2),
    )
    report = {"run_id": result.run_id, "summary": summarize(result.records).to_dict(), "warnings": result.warnings}
    (out / "bench-matched.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report, default=str)[:3000], flush=True)


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
        matched(Path(sys.argv[2]), sys.argv[3])
    else:
        seed(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
