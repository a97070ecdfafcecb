"""What the gateway adds to TTFT at 64 concurrent streams, beside the LiteLLM proxy in front of the same upstream,
in the same run.

The upstream is the SSE fixture server (tests/fixtures/sse_fixture.py, not an LLM): a known 20 ms to the first
chunk and 20 ms between chunks, so any difference is the proxy's. Three paths to it, each its own process:
direct, through `servelab gateway`, through `litellm --config` (an OpenAI-compatible model entry with the
fixture as api_base). servelab's load generator runs 64 concurrent streams per path per round, the paths
interleaved over rounds, two ways: burst (64 requests of 8 chunks sent at once, per wave: the worst case, every
request queues behind the others) and steady (64 clients in a closed loop for --seconds, 4-32 chunks a request,
so arrivals spread out). Added TTFT = the path's TTFT minus direct's, at p50 and p99.

usage: python benchmarks/gateway/run.py [--streams 64] [--rounds 5] [--litellm /tmp/litellm/bin/litellm]
       (LiteLLM in a venv of its own: python3 -m venv /tmp/litellm && /tmp/litellm/bin/pip install 'litellm[proxy]')
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from servelab.core.summary import ttft_ms
from servelab.engines.client import ClientOptions, StreamClient

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "sse_fixture.py"
KEY = "sk-" + "5e" * 24  # both proxies check a client key (LiteLLM refuses to start without one)
BODY = {"model": "fixture", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}

GATEWAY = """
import sys, uvicorn
from servelab.gateway.app import create_app
from servelab.gateway.config import GatewayConfig, Policy, Upstream
from servelab.gateway.config import Keys
cfg = GatewayConfig(
    local=Upstream(url=sys.argv[1], health_path="/v1/models"),
    policy=Policy(health_interval_s=5),
    keys=Keys(clients=[sys.argv[3]]),
)
uvicorn.run(create_app(cfg)[0], host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
"""

LITELLM = """model_list:
  - model_name: fixture
    litellm_params:
      model: openai/fixture
      api_base: {api_base}
      api_key: none
litellm_settings:
  drop_params: false
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer in {timeout:.0f} s")


def start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


async def steady(url: str, streams: int, seconds: float, seed: int) -> list[float]:
    """``streams`` clients in a closed loop for ``seconds``, each request 4-32 chunks long (so the streams do
    not stay in step), TTFTs after the first second."""
    client = StreamClient(url, options=ClientOptions(include_usage=False, api_key=KEY))
    rng = random.Random(seed)
    start = time.monotonic()
    out: list[float] = []

    async def worker() -> None:
        while time.monotonic() - start < seconds:
            record = await client.send("chat", dict(BODY, max_tokens=rng.randint(4, 32)))
            if record.error:
                raise SystemExit(f"{url}: {record.error_detail}")
            if (t := ttft_ms(record)) is not None and time.monotonic() - start > 1.0:
                out.append(t)

    await asyncio.gather(*(worker() for _ in range(streams)))
    return out


async def one_wave(url: str, streams: int) -> list[float]:
    client = StreamClient(url, options=ClientOptions(include_usage=False, api_key=KEY))
    records = await asyncio.gather(*(client.send("chat", dict(BODY)) for _ in range(streams)))
    bad = [r.error_detail for r in records if r.error]
    if bad:
        raise SystemExit(f"{url}: {len(bad)} failed, first: {bad[0]}")
    return [t for r in records if (t := ttft_ms(r)) is not None]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--litellm", default="/tmp/litellm/bin/litellm")
    ap.add_argument("--mode", default="both", choices=["burst", "steady", "both"])
    ap.add_argument("--seconds", type=float, default=6.0, help="steady: seconds per path and round")
    args = ap.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        fixture = subprocess.Popen([sys.executable, str(FIXTURE)], stdout=subprocess.PIPE, text=True)
        procs.append(fixture)  # type: ignore[arg-type]
        assert fixture.stdout
        upstream = f"http://127.0.0.1:{int(fixture.stdout.readline())}/schedule"
        paths = {"direct": upstream}
        gw_port = free_port()
        procs.append(start([sys.executable, "-c", GATEWAY, upstream, str(gw_port), KEY]))
        paths["servelab gateway"] = f"http://127.0.0.1:{gw_port}"
        wait_http(paths["servelab gateway"] + "/healthz")
        if Path(args.litellm).exists():
            cfg = Path(tempfile.mkdtemp()) / "litellm.yaml"
            cfg.write_text(LITELLM.format(api_base=upstream + "/v1"))
            ll_port = free_port()
            env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": KEY}
            procs.append(start([args.litellm, "--config", str(cfg), "--port", str(ll_port), "--num_workers", "1"], env))
            paths["LiteLLM proxy"] = f"http://127.0.0.1:{ll_port}"
            wait_http(paths["LiteLLM proxy"] + "/health/liveliness")
        else:
            print(f"no LiteLLM at {args.litellm}: measuring servelab alone", flush=True)
        for url in paths.values():  # warm every path (connections, imports, first-request work)
            asyncio.run(one_wave(url, args.streams))
        for mode in ("burst", "steady") if args.mode == "both" else (args.mode,):
            ttfts: dict[str, list[float]] = {name: [] for name in paths}
            for r in range(args.rounds):
                names = list(paths)
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    if mode == "burst":
                        ttfts[name] += asyncio.run(one_wave(paths[name], args.streams))
                    else:
                        ttfts[name] += asyncio.run(steady(paths[name], args.streams, args.seconds, r))
            report(ttfts, mode, args.streams, args.rounds)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def report(ttfts: dict[str, list[float]], mode: str, streams: int, rounds: int) -> None:
    base50, base99 = np.percentile(ttfts["direct"], [50, 99])
    what = "all sent at once, per wave" if mode == "burst" else "closed loop, 4-32 chunks each"
    print(
        f"{mode}: {streams} concurrent streams ({what}) x {rounds} rounds, TTFT in ms (fixture: 20 ms to first chunk)"
    )
    added: dict[str, tuple[float, float]] = {}
    for name, values in ttfts.items():
        p50, p99 = np.percentile(values, [50, 99])
        line = f"{name:18s} n={len(values):5d}  TTFT p50 {p50:8.3f}  p99 {p99:8.3f}"
        if name != "direct":
            added[name] = (p50 - base50, p99 - base99)
            line += f"   added p50 {p50 - base50:+8.3f}  p99 {p99 - base99:+8.3f}"
        print(line, flush=True)
    if "LiteLLM proxy" in added and "servelab gateway" in added:
        ours, theirs = added["servelab gateway"], added["LiteLLM proxy"]
        for i, q in enumerate(("p50", "p99")):
            ratio = theirs[i] / ours[i] if ours[i] > 0 else float("inf")
            print(f"LiteLLM adds / servelab adds at {q}: {ratio:.1f}x", flush=True)


if __name__ == "__main__":
    main()
