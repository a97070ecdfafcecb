"""On the GPU host: `servelab coexist` through the library (no CLI dependencies there): the GPU probe, a stand-in
shaped like a 0.6B streaming TTS decoder (28 layers of 1024, bf16, one CUDA graph per step, 8 steps per 40 ms
chunk, 50 chunks an utterance, one due every second), with AVATAR=1 the avatar stand-in beside it (frames at 25 fps),
alone and beside Laguna S 2.1 decode (4 streams x 256 tokens), 32K-token prefills (back to back, never cached), and
the rest of the conditions (CONDITIONS, default the seed's layers alone,avatar,decode,prefill,all with AVATAR=1,
else alone,decode,prefill,both); each LLM load also with no probe (the LLM's share). MITIGATIONS="NAME=URL ..." runs
the LLM conditions again against each (LEASE="NAME=ADMIN_KEY": a servelab gateway whose realtime lease is held while
the probes speak). 2 rounds x 10 utterances (UTTERANCES) = 1,000 chunks per condition. Writes coexist-LABEL.json
(figures, verdicts) and runs.sqlite (LLM records, every utterance) to OUTDIR; a SIGTERM (a `timeout` running out)
stops it like Ctrl-C, keeping in runs.sqlite every utterance measured so far.

usage: [AVATAR=1] [CONDITIONS=...] [MITIGATIONS=...] [LEASE=...] [UTTERANCES=10] \
       python coexist_run.py OUTDIR LLM_URL LABEL SHARING
       (SHARING: time-sliced | mps:PCT | green:SMS)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from servelab.bench import resolve_targets
from servelab.coexist import (
    CONDITIONS,
    SEED_LAYERS,
    CoexistOptions,
    Lease,
    LlmLoad,
    Mitigation,
    WorkerProbe,
    WorkerSpec,
    mitigation_lines,
    parse_sharing,
    run_coexist,
)
from servelab.core.store import RunStore


def mitigations() -> tuple[Mitigation, ...]:
    specs = [m.partition("=") for m in os.environ.get("MITIGATIONS", "").split()]
    leases = dict(item.partition("=")[::2] for item in os.environ.get("LEASE", "").split())
    targets = resolve_targets([(name, url) for name, _, url in specs]) if specs else []
    return tuple(Mitigation(t.name, t, Lease(t.url, leases[t.name]) if t.name in leases else None) for t in targets)


def main(out: Path, url: str, label: str, sharing: str) -> None:
    share = parse_sharing(sharing)
    voice = WorkerSpec("cuda", "voice", 1024, 28, 3072, steps_per_chunk=8, chunk_ms=40, chunks=50, period_ms=1000)
    voice.green_sms = share.get("probe_sms", 0)
    probes = [WorkerProbe(voice)]
    if os.environ.get("AVATAR"):
        probes.append(WorkerProbe(WorkerSpec("cuda", "frames", 1024, 12, 3072, fps=25, period_ms=1000)))
    default = SEED_LAYERS if len(probes) > 1 else CONDITIONS
    options = CoexistOptions(
        conditions=tuple(os.environ["CONDITIONS"].split(",")) if os.environ.get("CONDITIONS") else default,
        repeats=2,
        utterances=int(os.environ.get("UTTERANCES", "10")),
        load=LlmLoad(decode_streams=4, decode_tokens=256, prefill_tokens=32000),
        settle_s=2.0,
        sharing={**share, "label": label},
        mitigations=mitigations(),
    )
    with RunStore(out / "runs.sqlite") as db:
        result = run_coexist(db, probes, resolve_targets([("laguna", url)])[0], options)
    stored = result.stored()
    (out / f"coexist-{label}.json").write_text(stored.model_dump_json(indent=1))
    for c in result.conditions:
        under = ", ".join(f"@{lf.lookahead_ms:g}ms {lf.underruns}" for lf in c.listeners)
        llm = f"llm {c.llm.aggregate_tok_s:.0f} tok/s" if c.llm else "llm -"
        kept = f" kept {c.llm.tok_s_share:.0%}" if c.llm and c.llm.tok_s_share is not None else ""
        print(
            f"{label} {c.condition:18s} {c.probe:10s} chunks {c.chunks} ttfa p50 {c.ttfa_p50_ms or 0:.1f} ms  "
            f"lateness p99 {c.lag_p99_ms or 0:.1f} ms  fps {c.min_fps or 0:.1f}  underruns {under}  {llm}{kept}  "
            f"{c.verdict or ''}",
            flush=True,
        )
    for line in mitigation_lines(result.conditions):
        print(label, line, flush=True)
    print(label, "warnings:", result.warnings[:4], "failed:", result.failed, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
