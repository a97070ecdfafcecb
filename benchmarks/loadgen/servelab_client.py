"""servelab's streaming client as a load generator: N concurrent streams against the sink, on one core.
Prints JSON: chunks parsed per second and the stamp error (arrival - the sink's send time) per chunk.

usage: python servelab_client.py URL STREAMS CHUNKS [CPU]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import numpy as np
from stamps import parse

from servelab.engines.client import StreamClient


async def run(url: str, streams: int, chunks: int) -> dict[str, float]:
    client = StreamClient(url)
    body = {"model": "sink", "messages": [{"role": "user", "content": "go"}], "max_tokens": chunks}
    start = time.perf_counter_ns()
    records = await asyncio.gather(*(client.send("chat", dict(body)) for _ in range(streams)))
    wall = (time.perf_counter_ns() - start) / 1e9
    errors, gaps, leads, received, failed = [], [], [], 0, 0
    for r in records:
        if r.error:
            failed += 1
            continue
        recv, sent = parse(r.output_text)
        leads.append((recv - (r.sent_ns or 0)) / 1e6)
        errors += [(a - s) / 1e6 for a, s in zip(r.chunk_ns, sent, strict=True)]
        gaps += list(np.diff(r.chunk_ns) / 1e6)
        received += len(r.chunk_ns)
    err = np.array(errors)
    return {
        "tool": "servelab",
        "streams": streams,
        "chunks": received,
        "failed": failed,
        "wall_s": wall,
        "chunks_per_s": received / wall,
        "err_p50_ms": float(np.median(err)),
        "err_p99_ms": float(np.percentile(err, 99)),
        "err_max_ms": float(err.max()),
        "lead_p50_ms": float(np.median(leads)),
        "itl_p50_ms": float(np.median(gaps)),
        "itl_p99_ms": float(np.percentile(gaps, 99)),
    }


if __name__ == "__main__":
    if len(sys.argv) > 4:
        os.sched_setaffinity(0, {int(sys.argv[4])})
    print(json.dumps(asyncio.run(run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
