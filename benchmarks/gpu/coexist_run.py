"""On the GPU host: `servelab coexist` through the library (no CLI dependencies there): the GPU probe, a stand-in
shaped like a 0.6B streaming TTS decoder (28 layers of 1024, bf16, one CUDA graph per step, 8 steps per 40 ms
chunk, 50 chunks an utterance, one due every second), alone and beside Laguna S 2.1 decode (4 streams x 256
tokens), 32K-token prefills (back to back, never cached), and both. 2 rounds x 10 utterances = 1,000 chunks per
condition. Writes coexist-LABEL.json (figures) and runs.sqlite (LLM records, every utterance) to OUTDIR.

usage: python coexist_run.py OUTDIR LLM_URL LABEL SHARING   (SHARING: time-sliced | mps:PCT | green:SMS)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servelab.bench import resolve_targets
from servelab.coexist import CoexistOptions, LlmLoad, parse_sharing, run_coexist
from servelab.coexist.probes import WorkerProbe, WorkerSpec
from servelab.core.store import RunStore


def main(out: Path, url: str, label: str, sharing: str) -> None:
    share = parse_sharing(sharing)
    spec = WorkerSpec("cuda", "voice", 1024, 28, 3072, steps_per_chunk=8, chunk_ms=40, chunks=50, period_ms=1000)
    spec.green_sms = share.get("probe_sms", 0)
    options = CoexistOptions(
        repeats=2,
        utterances=10,
        load=LlmLoad(decode_streams=4, decode_tokens=256, prefill_tokens=32000),
        settle_s=2.0,
        sharing={**share, "label": label},
    )
    with RunStore(out / "runs.sqlite") as db:
        result = run_coexist(db, WorkerProbe(spec), resolve_targets([("laguna", url)])[0], options)
    report = {
        "run_id": result.run_id,
        "probe": result.probe,
        "sharing": result.sharing,
        "conditions": [c.to_dict() for c in result.conditions],
        "warnings": result.warnings,
        "failed": result.failed,
    }
    (out / f"coexist-{label}.json").write_text(json.dumps(report, indent=1, default=str))
    for c in result.conditions:
        under = ", ".join(f"@{lf.lookahead_ms:g}ms {lf.underruns}" for lf in c.listeners)
        print(
            f"{label} {c.condition:8s} chunks {c.chunks} ttfa p50 {c.ttfa_p50_ms or 0:.1f} ms  interval p50 "
            f"{c.interval_p50_ms or 0:.2f} p99 {c.interval_p99_ms or 0:.2f} max {c.interval_max_ms or 0:.1f} ms  "
            f"rtf {c.rtf_mean or 0:.3f}  underruns {under}  llm {c.llm.get('requests', 0)} req",
            flush=True,
        )
    print(label, "warnings:", result.warnings[:4], "failed:", result.failed, flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
