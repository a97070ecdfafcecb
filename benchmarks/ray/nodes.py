"""`bench --ray` from one node against two: the chunk rate the load actors parse and their stamp error (a chunk's
arrival, mapped onto the coordinator's clock, minus the sink's own send time), on a Ray cluster on this host.

The cluster: servelab.testing.ray_cluster, a head and a second node on loopback, CPUS each. The sink: SINKS processes
of the FAKE SSE server of servelab.testing (not an LLM) sharing one port; every stream gets ``burst`` chunks every
``itl_ms``, each carrying the sink's perf_counter_ns() before the write. One host has one CLOCK_MONOTONIC, so the
error (its size: |arrival - send|) is the stamp's own plus the clock mapping's, whose offsets (truly 0 here) are
printed with their bounds. One node: one actor of
``streams-per-actor`` streams; two nodes: two actors (the placement group spreads them), twice the streams.

usage: python benchmarks/ray/nodes.py [--streams-per-actor 32] [--chunks 200] [--itl-ms 10] [--burst 4]
                                      [--sinks 1] [--repeats 3] [--cpus 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from dataclasses import replace

import numpy as np

from servelab.core.records import RequestRecord
from servelab.load import Load, Target
from servelab.load.cluster import disconnect, run_on_ray
from servelab.load.scenarios import load_scenario
from servelab.testing.ray_cluster import local_ray_cluster

SINK = "from servelab.testing.sse_server import main; main()"


def start_sinks(count: int, chunks: int, itl_ms: float, burst: int) -> tuple[list[subprocess.Popen[str]], str]:
    procs: list[subprocess.Popen[str]] = []
    port = 0
    for _ in range(count):
        cmd = [sys.executable, "-c", SINK, str(port), "--sink", str(chunks), str(itl_ms), str(burst), "--reuse-port"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        assert procs[-1].stdout is not None
        port = int(procs[-1].stdout.readline())
    return procs, f"http://127.0.0.1:{port}"


def sent_times(record: RequestRecord) -> list[int]:
    words = record.output_text.split()
    return [int(words[0].partition(":")[2]), *(int(w) for w in words[1:])]


def figures(records: list[RequestRecord]) -> dict[str, float]:
    ok = [r for r in records if r.ok]
    errors = np.array([abs(a - s) / 1e6 for r in ok for a, s in zip(r.chunk_ns, sent_times(r), strict=True)])
    start = min(r.sent_ns for r in ok if r.sent_ns is not None)
    end = max(r.end_ns for r in ok if r.end_ns is not None)
    return {"failed": len(records) - len(ok), "chunks_per_s": errors.size / ((end - start) / 1e9),
            "err_p50_ms": float(np.median(errors)), "err_p99_ms": float(np.percentile(errors, 99))}  # fmt: skip


def run(
    url: str, address: str, actors: int, streams: int, chunks: int
) -> tuple[dict[str, float], list[dict[str, int]]]:
    got: list[RequestRecord] = []
    load = Load(requests=streams, concurrency=streams, warmup=0, max_tokens=chunks, fixed_output="off",
                unique_prefix=False, workers=actors)  # fmt: skip
    scenario = replace(load_scenario("code-chat"), concurrency=streams)
    result = asyncio.run(run_on_ray(Target("sink", url, "sink"), scenario, load, got.append, address))
    assert len({c.node for c in result.clients}) == actors, "the actors were not spread one per node"
    return figures(got), result.hosts


def _offset(host: dict[str, int]) -> str:
    return f"{host['offset_ns'] / 1e3:+.0f} us (bound {host['bound_ns'] / 1e3:.0f} us)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams-per-actor", type=int, default=32)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=4)
    parser.add_argument("--sinks", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=1)
    args = parser.parse_args()
    sinks, url = start_sinks(args.sinks, args.chunks, args.itl_ms, args.burst)
    rows: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    try:
        with local_ray_cluster(("head", "second"), cpus=args.cpus) as cluster:
            try:
                for _ in range(args.repeats):
                    for nodes in (1, 2):
                        streams = nodes * args.streams_per_actor
                        row, hosts = run(url, cluster.address, nodes, streams, args.chunks)
                        rows[nodes].append(row)
                        offered = streams * args.burst * 1000 / args.itl_ms
                        print(f"nodes {nodes} streams {streams:4d} offered {offered:8.0f}/s parsed "
                              f"{row['chunks_per_s']:8.0f}/s error p50 {row['err_p50_ms']:7.3f} p99 "
                              f"{row['err_p99_ms']:7.3f} ms failed {row['failed']:.0f}; offsets "
                              f"{', '.join(_offset(h) for h in hosts)}", flush=True)  # fmt: skip
            finally:
                disconnect()
    finally:
        for s in sinks:
            s.terminate()
    med = {n: {k: statistics.median(r[k] for r in rows[n]) for k in rows[n][0]} for n in rows}
    print(f"medians of {args.repeats}: one node {med[1]['chunks_per_s']:.0f} chunks/s, p50 {med[1]['err_p50_ms']:.3f} "
          f"p99 {med[1]['err_p99_ms']:.3f} ms; two nodes {med[2]['chunks_per_s']:.0f} chunks/s, p50 "
          f"{med[2]['err_p50_ms']:.3f} p99 {med[2]['err_p99_ms']:.3f} ms")  # fmt: skip
    ratio = {k: med[2][k] / med[1][k] for k in ("chunks_per_s", "err_p50_ms", "err_p99_ms")}
    print(f"ratio two nodes / one: chunk rate {ratio['chunks_per_s']:.2f}x, |stamp error| p50 "
          f"{ratio['err_p50_ms']:.2f}x, "
          f"p99 {ratio['err_p99_ms']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
