"""The load-generator benchmark's sink: the FAKE SSE server of servelab.testing (not an LLM) in its ``sink`` mode,
every stream ``burst`` chat chunks every ``itl_ms``, each carrying the server's perf_counter_ns() taken before the
write (the first ``RECV:SENT``), then usage and [DONE]; serves GET /v1/models. Pin it to its own core.

usage: python sink.py PORT CHUNKS ITL_MS BURST [CPU]
"""

from __future__ import annotations

import sys

from servelab.testing.sse_server import main

if __name__ == "__main__":
    port, chunks, itl_ms, burst, *cpu = sys.argv[1:]
    main([port, "--sink", chunks, itl_ms, burst, *(["--cpu", cpu[0]] if cpu else [])])
