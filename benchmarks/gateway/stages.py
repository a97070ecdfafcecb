"""Where the gateway's request path spends its time, stage by stage, in the gateway's own process: each named
function is wrapped to time its calls (``perf_counter_ns``), and the whole path is timed from the request's first
bytes read to the upstream request being written. One stream; requests back to back (``--gap-ms 0``) or spaced
(each gap lets the process sleep: the voice case). Trees compared by their src/ folders, one after the other.

usage: python benchmarks/gateway/stages.py [--requests 400] [--gap-ms 0] [--tokenizer DIR] LABEL=SRC [LABEL=SRC ...]
(the wrapper overhead is in every stage alike; compare trees, not absolute figures)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import FIXTURE, KEY, wait_http

from servelab.testing import free_port

STAGES = (
    "servelab.gateway.endpoints:Router.gate",
    "servelab.gateway.app:Gateway.client_denied",
    "servelab.gateway.app:parse_body",
    "servelab.gateway.estimate:Admission.figure",
    "servelab.gateway.app:Gateway.facts",
    "servelab.gateway.app:Gateway._prefill",
    "servelab.gateway.app:Gateway._release",
    "servelab.gateway.server:Connection.on_headers_complete",
    "servelab.gateway.server:Connection.on_message_complete",
    "servelab.gateway.app:Gateway.rehearse",
    "servelab.gateway.app:by_size",
    "servelab.gateway.app:Gateway._headers",
)
GATEWAY = Path(__file__).with_name("stages_gateway.py")
BODY = {"model": "fixture", "messages": [{"role": "user", "content": "Say hi in three words please."}],
        "max_tokens": 2, "stream": True}  # fmt: skip


def measure(src: str, upstream: str, args: argparse.Namespace) -> dict[str, list[int]]:
    """One gateway from ``src`` with its stages wrapped, ``args.requests`` requests through it, its timings."""
    port, out = free_port(), Path(tempfile.mkdtemp()) / "stages.json"
    local = {"url": upstream, "health_path": "/v1/models", "tokenizer": args.tokenizer}
    config = {"host": "127.0.0.1", "port": port, "local": local, "policy": {"health_interval_s": 5},
              "keys": {"clients": [KEY]}}  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, str(GATEWAY), json.dumps(config), str(out), *STAGES]
    gateway = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        with httpx.Client(headers={"authorization": f"Bearer {KEY}"}) as client:
            for _ in range(args.requests):
                with client.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=BODY) as answer:
                    for _chunk in answer.iter_bytes():
                        pass
                time.sleep(args.gap_ms / 1000)
        gateway.send_signal(__import__("signal").SIGUSR1)
        gateway.wait(timeout=30)
        timings: dict[str, list[int]] = json.loads(out.read_text())
        return timings
    finally:
        gateway.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--gap-ms", type=float, default=0.0)
    parser.add_argument("--tokenizer", default=str(Path.cwd() / ".bench-tokenizer"))
    parser.add_argument("trees", nargs="+", metavar="LABEL=SRC")
    args = parser.parse_args()
    fixture = subprocess.Popen([sys.executable, str(FIXTURE)], stdout=subprocess.PIPE)
    try:
        assert fixture.stdout is not None
        upstream = f"http://127.0.0.1:{int(fixture.stdout.readline())}/schedule"
        for label, src in (t.split("=", 1) for t in args.trees):
            print(f"== {label} (gap {args.gap_ms:g} ms)")
            for stage, values in measure(src, upstream, args).items():
                kept = values[20:]  # the first requests warm the process
                if kept:
                    print(f"{stage}: n={len(kept)} median {statistics.median(kept) / 1e3:.1f} us")
    finally:
        fixture.kill()


if __name__ == "__main__":
    main()
