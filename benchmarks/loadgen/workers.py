"""servelab's load from 1, 2, 4 ... worker processes against the sink, beside `vllm bench serve` (one process) on the
same streams, in one run: the chunk rate each parses and its stamp error (arrival - the sink's send time).

Sinks: SINKS processes of the FAKE SSE server (servelab.testing, not an LLM) sharing one port (SO_REUSEPORT), each
pinned to one of the last cores; every stream gets ``burst`` chunks every ``itl_ms``, each carrying the sink's
perf_counter_ns() before the write (CLOCK_MONOTONIC: one clock for every process on the host). servelab's W workers
and the parent merging their records are confined to the first W cores; `vllm bench serve` to the same cores.

usage: python benchmarks/loadgen/workers.py [--workers 1,2,4,8] [--streams-per-worker 80] [--chunks 1600]
                                            [--sinks 4] [--vllm] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from run import LIMIT_MS, run_vllm
from stamps import parse

from servelab.core.records import RequestRecord
from servelab.load import Load, Target, run_in_workers
from servelab.load.scenarios import load_scenario

HERE = Path(__file__).resolve().parent
SINK = "from servelab.testing.sse_server import main; main()"


def start_sinks(count: int, chunks: int, itl_ms: float, burst: int) -> tuple[list[subprocess.Popen[str]], str]:
    cores = sorted(os.sched_getaffinity(0))
    procs: list[subprocess.Popen[str]] = []
    port = 0
    for k in range(count):
        cmd = [sys.executable, "-c", SINK, str(port), "--sink", str(chunks), str(itl_ms)]
        cmd += [str(burst), "--cpu", str(cores[-1 - k]), "--reuse-port"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        assert procs[-1].stdout is not None
        port = int(procs[-1].stdout.readline())
    return procs, f"http://127.0.0.1:{port}"


def figures(records: list[RequestRecord], workers: int, streams: int) -> dict[str, float]:
    errors: list[float] = []
    chunks = failed = 0
    for r in records:
        if r.error:
            failed += 1
            continue
        _, sent = parse(r.output_text)
        errors += [(a - s) / 1e6 for a, s in zip(r.chunk_ns, sent, strict=True)]
        chunks += len(r.chunk_ns)
    start = min(r.sent_ns for r in records if r.sent_ns is not None)
    end = max(r.end_ns for r in records if r.end_ns is not None)
    err = np.array(errors)
    return {
        "workers": workers,
        "streams": streams,
        "failed": failed,
        "chunks_per_s": chunks / ((end - start) / 1e9),
        "err_p50_ms": float(np.median(err)),
        "err_p99_ms": float(np.percentile(err, 99)),
    }


def run_servelab(url: str, workers: int, streams: int, chunks: int) -> dict[str, float]:
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:workers]))  # the workers inherit it
    got: list[RequestRecord] = []
    load = Load(requests=streams, concurrency=streams, warmup=0, max_tokens=chunks, fixed_output="off",
                unique_prefix=False, workers=workers)  # fmt: skip
    scenario = replace(load_scenario("code-chat"), concurrency=streams)
    asyncio.run(run_in_workers(Target("sink", url, "sink"), scenario, load, got.append, workers=workers))
    return figures(got, workers, streams)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--streams-per-worker", type=int, default=80)
    parser.add_argument("--chunks", type=int, default=1600)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=8)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--vllm", action="store_true", help="also `vllm bench serve` on the same streams")
    parser.add_argument("--tokenizer", default=str(Path.home() / ".servelab" / "models" / "smollm2-135m-instruct"))
    args = parser.parse_args()
    all_cores = os.sched_getaffinity(0)
    sinks, url = start_sinks(args.sinks, args.chunks, args.itl_ms, args.burst)
    rows: list[tuple[str, dict[str, float]]] = []
    try:
        for w in (int(x) for x in args.workers.split(",")):
            streams = w * args.streams_per_worker
            offered = streams * args.burst * 1000 / args.itl_ms
            for name in ("servelab", "vllm bench serve") if args.vllm else ("servelab",):
                if name == "servelab":
                    row = run_servelab(url, w, streams, args.chunks)
                else:
                    row = _vllm(url, w, streams, args.chunks, args.tokenizer)
                os.sched_setaffinity(0, all_cores)
                rows.append((name, row))
                print(
                    f"{name:17s} workers {w:2d} streams {streams:4d} offered {offered:8.0f}/s "
                    f"parsed {row['chunks_per_s']:8.0f}/s error p50 {row['err_p50_ms']:7.3f} "
                    f"p99 {row['err_p99_ms']:7.3f} ms",
                    flush=True,
                )
                time.sleep(0.5)
    finally:
        for s in sinks:
            s.terminate()
    for name in dict.fromkeys(n for n, _ in rows):
        ok = [r["chunks_per_s"] for n, r in rows if n == name and r["err_p99_ms"] <= LIMIT_MS]
        print(f"{name}: highest chunk rate at p99 error <= {LIMIT_MS} ms: {max(ok, default=0):.0f}/s")
    ours = [r for n, r in rows if n == "servelab"]
    peer = [r for n, r in rows if n == "vllm bench serve"]
    if ours and peer:
        print("ratio servelab / vllm bench serve parse rate at the most workers: "
              f"{ours[-1]['chunks_per_s'] / peer[-1]['chunks_per_s']:.2f}x")  # fmt: skip


def _vllm(url: str, workers: int, streams: int, chunks: int, tokenizer: str) -> dict[str, float]:
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:workers]))  # its child inherits the same cores
    row = run_vllm(url, streams, chunks, tokenizer)
    row["workers"] = 1
    return row


if __name__ == "__main__":
    main()
