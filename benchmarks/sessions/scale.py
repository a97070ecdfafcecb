"""Sessions at scale: 1,000 concurrent sessions from one load process and from two, against a sink, beside
`vllm bench serve` driving as many single-turn streams at once as the sessions kept in flight on average.

The sink (servelab.testing.sse_server --sink, not an LLM) answers every request with CHUNKS chunks, BURST to an
event every ITL_MS, each carrying its own send time (perf_counter_ns: one clock on one host). A session's turns
(a short head, a few turns, a think time between them) go through servelab's session runner as `bench --sessions`
sends them; per chunk the stamp error is |the client's arrival - the sink's send time|. `vllm bench serve` has no
multi-turn mode in vLLM 0.32: its figures are for the same chunk shape at the sessions' mean streams in flight.

usage: python benchmarks/sessions/scale.py [--sessions 1000] [--turns 3] [--think 1.0-2.0] [--chunks 20]
                                           [--itl-ms 50] [--burst 2] [--repeats 2] [--tokenizer DIR]
       (the embedded model's tokenizer for vllm bench serve: `make check` puts it in ~/.servelab/models)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "loadgen"))
from run import run_vllm  # noqa: E402  (the loadgen benchmark's peer run, its stamps read the same way)
from stamps import parse  # noqa: E402

from servelab.core.records import RequestRecord  # noqa: E402
from servelab.load import Load, Target  # noqa: E402
from servelab.load.sessions import SessionSpec, of_spec  # noqa: E402
from servelab.load.workers import run_in_workers  # noqa: E402

SINK = "from servelab.testing.sse_server import main; main()"


def start_sink(chunks: int, itl_ms: float, burst: int) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-c", SINK, "0", "--sink", str(chunks), str(itl_ms), str(burst)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def figures(records: list[RequestRecord]) -> dict[str, float]:
    ok = [r for r in records if r.ok and r.labels.turn]
    errors = np.array([abs(a - s) / 1e6 for r in ok for a, s in zip(r.chunk_ns, parse(r.output_text)[1], strict=False)])
    start = min(r.sent_ns for r in ok if r.sent_ns is not None)
    end = max(r.end_ns for r in ok if r.end_ns is not None)
    busy = sum((r.end_ns or 0) - (r.sent_ns or 0) for r in ok)
    later = np.array([abs(a - s) / 1e6 for r in ok if (r.labels.turn or 0) > 1
                      for a, s in zip(r.chunk_ns, parse(r.output_text)[1], strict=False)])  # fmt: skip
    return {"turns": len(ok), "failed": sum(1 for r in records if r.labels.turn and not r.ok),
            "chunks_per_s": errors.size / ((end - start) / 1e9), "in_flight_mean": busy / (end - start),
            "err_p50_ms": float(np.median(errors)), "err_p99_ms": float(np.percentile(errors, 99)),
            "later_p99_ms": float(np.percentile(later, 99)) if later.size else float("nan")}  # fmt: skip


def run_sessions(url: str, spec: SessionSpec, workers: int) -> dict[str, float]:
    got: list[RequestRecord] = []
    load = Load(concurrency=spec.sessions, warmup=0, fixed_output="off", workers=workers, unique_prefix=False)
    target = Target("sink", url, "sink", max_model_len=None)
    asyncio.run(run_in_workers(target, of_spec(spec), load, got.append, workers=workers))
    return figures(got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--think", default="1.0-2.0")
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--burst", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tokenizer", default=str(Path.home() / ".servelab" / "models" / "smollm2-135m-instruct"))
    args = parser.parse_args()
    low, _, high = args.think.partition("-")
    think = [float(low), float(high or low)]
    spec = SessionSpec.model_validate({"name": "scale", "sessions": args.sessions, "turns": args.turns,
                                       "head_tokens": 200, "turn_tokens": 40, "output_tokens": args.chunks,
                                       "think_time_s": think, "summary_tokens": 100})  # fmt: skip
    sink, url = start_sink(args.chunks, args.itl_ms, args.burst)
    rows: dict[str, list[dict[str, float]]] = {"sessions x1": [], "sessions x2": [], "vllm bench serve": []}
    try:
        for _ in range(args.repeats):
            for workers in (1, 2):
                row = run_sessions(url, spec, workers)
                rows[f"sessions x{workers}"].append(row)
                print(f"servelab sessions, {workers} process(es): {row['turns']:.0f} turns ({row['failed']:.0f} "
                      f"failed), {row['in_flight_mean']:.0f} in flight on average, {row['chunks_per_s']:.0f} chunks/s, "
                      f"error p50 {row['err_p50_ms']:.3f} p99 {row['err_p99_ms']:.3f} ms (turns after the first: p99 "
                      f"{row['later_p99_ms']:.3f} ms)", flush=True)  # fmt: skip
            streams = max(1, round(statistics.median(r["in_flight_mean"] for r in rows["sessions x1"])))
            peer = run_vllm(url, streams, args.chunks, args.tokenizer)
            rows["vllm bench serve"].append(peer)
            print(f"vllm bench serve, {streams} streams: {peer['chunks_per_s']:.0f} chunks/s, error p50 "
                  f"{peer['err_p50_ms']:.3f} p99 {peer['err_p99_ms']:.3f} ms", flush=True)  # fmt: skip
    finally:
        sink.terminate()
    med = {name: {k: statistics.median(float(r[k]) for r in got) for k in ("chunks_per_s", "err_p50_ms", "err_p99_ms")}
           for name, got in rows.items()}  # fmt: skip
    for name, m in med.items():
        print(f"median of {args.repeats}: {name}: {m['chunks_per_s']:.0f} chunks/s, error p50 {m['err_p50_ms']:.3f} "
              f"p99 {m['err_p99_ms']:.3f} ms")  # fmt: skip
    one, two, peer = med["sessions x1"], med["sessions x2"], med["vllm bench serve"]
    print(f"ratio two processes / one: |stamp error| p50 {two['err_p50_ms'] / one['err_p50_ms']:.2f}x, "
          f"p99 {two['err_p99_ms'] / one['err_p99_ms']:.2f}x")  # fmt: skip
    print(
        f"ratio servelab sessions (one process) / vllm bench serve: |stamp error| p50 "
        f"{one['err_p50_ms'] / peer['err_p50_ms']:.2f}x, p99 {one['err_p99_ms'] / peer['err_p99_ms']:.2f}x"
    )


if __name__ == "__main__":
    main()
