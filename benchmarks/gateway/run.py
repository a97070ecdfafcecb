"""What the gateway adds to TTFT and to the gaps between chunks (ITL), beside the LiteLLM proxy in front of the
same upstream, in the same run, at 1, 64 and 256 concurrent streams.

The upstream is the SSE fixture server (tests/fixtures/sse_fixture.py, not an LLM): a known 20 ms to the first
chunk and 20 ms between chunks, so any difference is the proxy's. Paths, each its own process(es): direct,
`servelab gateway` with 1 worker and with N workers, `litellm --config` (N workers; an OpenAI-compatible model
entry with the fixture as api_base). servelab's load generator runs closed-loop streams (4-32 chunks a request,
so they do not stay in step) for --seconds per path, level and round, the paths interleaved over rounds; or,
with --mode burst, waves of that many requests sent at once. Where the machine has the cores, the load
generator, the upstream and the proxies are pinned to separate cores (taskset / sched_setaffinity).
Added = the path's percentile minus direct's. Ratios printed: LiteLLM's added over servelab's.

usage: python benchmarks/gateway/run.py [--levels 1,64,256] [--rounds 3] [--seconds 6] [--workers N]
       [--litellm /tmp/litellm/bin/litellm | none] [--mode steady|burst] [--tokens 4,32] [--relay] [--c-relay]
       [--busy-poll US] [--variant LABEL=JSON ...] [--awake] [--tokenizer MODEL_FOLDER]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from servelab.core.paths import servelab_home
from servelab.core.records import RequestRecord
from servelab.core.summary import ttft_ms
from servelab.engines.client import ClientOptions, StreamClient
from servelab.engines.local_server import cpu_seconds
from servelab.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "sse_fixture.py"
KEY = "sk-" + "5e" * 24  # both proxies check a client key (LiteLLM refuses to start without one)
BODY = {"model": "fixture", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
GATEWAY = """
import json, sys
from servelab.gateway import GatewayConfig, run
run(GatewayConfig.model_validate_json(sys.argv[1]), int(sys.argv[2]))
"""
RELAY = """
import asyncio, sys
import uvloop

class Up(asyncio.Protocol):
    def __init__(self, down): self.down = down
    def connection_made(self, t): self.t = t
    def data_received(self, d): self.down.write(d)
    def connection_lost(self, e): self.down.close()

class Down(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf, self.up = t, [], None
        asyncio.ensure_future(self.open())
    async def open(self):
        loop = asyncio.get_running_loop()
        _, self.up = await loop.create_connection(lambda: Up(self.t), sys.argv[1], int(sys.argv[2]))
        for b in self.buf: self.up.t.write(b)
    def data_received(self, d):
        self.buf.append(d) if self.up is None else self.up.t.write(d)
    def connection_lost(self, e):
        if self.up: self.up.t.close()

async def main():
    server = await asyncio.get_running_loop().create_server(Down, "127.0.0.1", int(sys.argv[3]), backlog=4096)
    await server.serve_forever()
uvloop.run(main())
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


def wait_http(url: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} did not answer in {timeout:.0f} s")


class Cores:
    """Separate cores for the load generator, the upstream and the proxies, where there are enough."""

    def __init__(self, workers: int) -> None:
        count = os.cpu_count() or 1
        self.pinned = count >= 8 and shutil.which("taskset") is not None
        load = max(2, count // 4)
        self.load = list(range(load))
        self.upstream = list(range(load, load + 2))
        self.proxy = list(range(load + 2, min(count, load + 2 + workers)))

    def argv(self, cores: list[int], argv: list[str]) -> list[str]:
        return ["taskset", "-c", ",".join(map(str, cores)), *argv] if self.pinned and cores else argv

    def describe(self) -> str:
        if not self.pinned:
            return f"not pinned ({os.cpu_count()} cores: all processes share them)"
        return f"load generator cores {self.load}, upstream {self.upstream}, proxy {self.proxy}"


def gaps(record: RequestRecord) -> list[float]:
    """Milliseconds between consecutive token-bearing events (what ITL means to a streaming client)."""
    times = record.chunk_ns
    return [(b - a) / 1e6 for a, b in itertools.pairwise(times)]


async def steady(
    url: str, streams: int, seconds: float, seed: int, tokens: tuple[int, int] = (4, 32)
) -> tuple[list[float], list[float]]:
    """``streams`` clients in a closed loop for ``seconds``; TTFTs and ITLs of requests after the first second."""
    client = StreamClient(url, options=ClientOptions(include_usage=False, api_key=KEY))
    rng = random.Random(seed)
    start = time.monotonic()
    ttfts: list[float] = []
    itls: list[float] = []

    async def worker() -> None:
        while time.monotonic() - start < seconds:
            record = await client.send("chat", dict(BODY, max_tokens=rng.randint(*tokens)))
            if record.error:
                raise SystemExit(f"{url}: {record.error_detail}")
            if (t := ttft_ms(record)) is not None and time.monotonic() - start > 1.0:
                ttfts.append(t)
                itls.extend(gaps(record))

    await asyncio.gather(*(worker() for _ in range(streams)))
    return ttfts, itls


async def burst(url: str, streams: int, waves: int) -> tuple[list[float], list[float]]:
    client = StreamClient(url, options=ClientOptions(include_usage=False, api_key=KEY))
    ttfts: list[float] = []
    itls: list[float] = []
    for _ in range(waves):
        records = await asyncio.gather(*(client.send("chat", dict(BODY)) for _ in range(streams)))
        if bad := [r.error_detail for r in records if r.error]:
            raise SystemExit(f"{url}: {len(bad)} failed, first: {bad[0]}")
        ttfts += [t for r in records if (t := ttft_ms(r)) is not None]
        itls += [g for r in records for g in gaps(r)]
    return ttfts, itls


SPIN = "import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True:\n    pass\n"


def keep_awake(cores: Cores) -> list[subprocess.Popen[bytes]]:
    """One SCHED_IDLE busy loop per pinned core: it runs only when nothing else wants the core, and any woken
    process preempts it at once, but the core never halts, so no path pays the wake-up of an idle (virtual) CPU.
    The same for every path; it shows what is the proxy's own work and what is the machine's wake-up."""
    used = sorted({*cores.load, *cores.upstream, *cores.proxy})
    return [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", SPIN]) for c in used]


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all its descendants (a proxy's worker processes)."""
    total, todo = 0.0, [pid]
    while todo:
        here = todo.pop()
        total += cpu_seconds(here) or 0.0
        for task in Path(f"/proc/{here}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return total


def c_relay() -> str:
    """benchmarks/gateway/relay.c built with the host's C compiler into a temporary folder."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("--c-relay needs a C compiler (cc or gcc)")
    binary = Path(tempfile.mkdtemp()) / "relay"
    subprocess.run([cc, "-O2", "-o", str(binary), str(Path(__file__).with_name("relay.c"))], check=True)
    return str(binary)


def start_paths(
    args: argparse.Namespace, cores: Cores, procs: list[subprocess.Popen[bytes]], owners: dict[str, int]
) -> dict[str, str]:
    """Start the upstream and every proxy; ``owners`` gets each proxy path's process id."""
    fixture = subprocess.Popen(cores.argv(cores.upstream, [sys.executable, str(FIXTURE)]), stdout=subprocess.PIPE)
    procs.append(fixture)
    assert fixture.stdout
    upstream = f"http://127.0.0.1:{int(fixture.stdout.readline())}/schedule"
    paths = {"direct": upstream}
    relays = {"bare TCP relay (uvloop)": [sys.executable, "-c", RELAY]} if args.relay else {}
    if args.c_relay:  # the same floor compiled (relay.c, epoll): what is the hop's and what is Python's
        relays["bare TCP relay (C, epoll)"] = [c_relay()]
    for name, command in relays.items():  # the floor: bytes passed on as read, an upstream connection per client's
        port = free_port()
        argv = [*command, "127.0.0.1", upstream.split(":")[2].split("/")[0], str(port)]
        procs.append(subprocess.Popen(cores.argv(cores.proxy[:1], argv)))
        paths[name] = f"http://127.0.0.1:{port}/schedule"
        owners[name] = procs[-1].pid
        wait_http(f"http://127.0.0.1:{port}/schedule/v1/models")
    quiet = subprocess.DEVNULL  # a gateway's stdout and stderr (its access log: a line a request)
    for workers, (label, server) in itertools.product(dict.fromkeys((1, args.workers)), gateway_variants(args)):
        port = free_port()
        local = {"url": upstream, "health_path": "/v1/models", "tokenizer": args.tokenizer}
        config = {"host": "127.0.0.1", "port": port, "local": local,
                  "policy": {"health_interval_s": 5}, "keys": {"clients": [KEY]}, "server": server}  # fmt: skip
        argv = [sys.executable, "-c", GATEWAY, json.dumps(config), str(workers)]
        procs.append(subprocess.Popen(cores.argv(cores.proxy[:workers], argv), stdout=quiet, stderr=quiet))
        name = f"servelab gateway x{workers}" + (f" {label}" if label else "")
        paths[name] = f"http://127.0.0.1:{port}"
        owners[name] = procs[-1].pid
        wait_http(paths[name] + "/healthz")
    for label, src in (c.split("=", 1) for c in args.compare):  # another servelab tree, 1 worker, same config
        port = free_port()
        local = {"url": upstream, "health_path": "/v1/models", "tokenizer": args.tokenizer}
        config = {"host": "127.0.0.1", "port": port, "local": local,
                  "policy": {"health_interval_s": 5}, "keys": {"clients": [KEY]}}  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        argv = [sys.executable, "-c", GATEWAY, json.dumps(config), "1"]
        procs.append(subprocess.Popen(cores.argv(cores.proxy[:1], argv), stdout=quiet, stderr=quiet, env=env))
        paths[f"servelab gateway x1 ({label})"] = f"http://127.0.0.1:{port}"
        owners[f"servelab gateway x1 ({label})"] = procs[-1].pid
        wait_http(f"http://127.0.0.1:{port}/healthz")
    if args.litellm != "none" and Path(args.litellm).exists():
        cfg = Path(tempfile.mkdtemp()) / "litellm.yaml"
        cfg.write_text(LITELLM.format(api_base=upstream + "/v1"))
        port = free_port()
        env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": KEY}
        argv = [
            args.litellm,
            "--config",
            str(cfg),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            str(args.workers),
        ]
        procs.append(subprocess.Popen(cores.argv(cores.proxy, argv), env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))  # fmt: skip
        paths[f"LiteLLM proxy x{args.workers}"] = f"http://127.0.0.1:{port}"
        owners[f"LiteLLM proxy x{args.workers}"] = procs[-1].pid
        wait_http(paths[f"LiteLLM proxy x{args.workers}"] + "/health/liveliness")
    else:
        print(f"no LiteLLM ({args.litellm}): measuring servelab alone", flush=True)
    return paths


def gateway_variants(args: argparse.Namespace) -> list[tuple[str, dict[str, object]]]:
    """The gateway's configurations to measure: its defaults, then --busy-poll and each --variant."""
    out: list[tuple[str, dict[str, object]]] = [("", {})]
    if args.busy_poll:
        out.append(("busy-poll", {"busy_poll_us": args.busy_poll}))
    for label, server in (v.split("=", 1) for v in args.variant):
        out.append((label, json.loads(server)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="1,64,256")
    ap.add_argument(
        "--tokenizer",
        default=str(servelab_home() / "models" / "smollm2-135m-instruct"),
        help="the model folder the gateway counts prompts with in process (the fixture has no /tokenize)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0, help="steady: seconds per path, level and round")
    ap.add_argument("--waves", type=int, default=3, help="burst: waves per path, level and round")
    ap.add_argument("--workers", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 4)))
    ap.add_argument("--litellm", default="/tmp/litellm/bin/litellm")
    ap.add_argument("--mode", default="steady", choices=["steady", "burst"])
    ap.add_argument("--tokens", default="4,32", help="steady: chunks a request, drawn from LO,HI")
    ap.add_argument("--busy-poll", type=int, default=0, help="also measure the gateway with [server] busy_poll_us")
    ap.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=SRC",
        help="also measure the gateway from another source tree (its src/ folder), 1 worker",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=JSON",
        help="also measure the gateway with these [server] fields, e.g. 'no-poll={\"first_byte_poll_ms\": 0}'",
    )
    ap.add_argument("--relay", action="store_true", help="also measure a bare TCP relay (the floor for a proxy)")
    ap.add_argument("--c-relay", action="store_true", help="also a compiled bare relay (relay.c: the hop's own floor)")
    ap.add_argument("--awake", action="store_true", help="keep every pinned core from idling (see keep_awake)")
    args = ap.parse_args()
    cores = Cores(args.workers)
    lo, hi = (int(x) for x in args.tokens.split(","))
    tokens = (lo, hi)
    if cores.pinned:
        os.sched_setaffinity(0, cores.load)
    print(f"{args.mode}; {cores.describe()}{'; cores kept awake' if args.awake else ''}", flush=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if args.awake:
            procs += keep_awake(cores)
        owners: dict[str, int] = {}
        paths = start_paths(args, cores, procs, owners)
        for url in paths.values():  # warm every path (connections, imports, first-request work)
            asyncio.run(burst(url, 64, 1))
        for level in (int(x) for x in args.levels.split(",")):
            got: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in paths}
            cpu = dict.fromkeys(paths, 0.0)
            for r in range(args.rounds):
                names = list(paths)
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    spent = tree_cpu(owners[name]) if name in owners else 0.0
                    if args.mode == "burst":
                        t, i = asyncio.run(burst(paths[name], level, args.waves))
                    else:
                        t, i = asyncio.run(steady(paths[name], level, args.seconds, r, tokens))
                    cpu[name] += (tree_cpu(owners[name]) - spent) if name in owners else 0.0
                    got[name][0].extend(t)
                    got[name][1].extend(i)
            report(got, level, args)
            report_cpu(cpu, args)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def report_cpu(cpu: dict[str, float], args: argparse.Namespace) -> None:
    """Each proxy's CPU over its measured time (its workers together), as a share of one core (steady mode)."""
    if args.mode != "steady":
        return
    wall = args.rounds * args.seconds
    shares = [f"{name} {spent / wall:.0%}" for name, spent in cpu.items() if name != "direct"]
    print(f"proxy CPU, share of one core while measured: {', '.join(shares)}", flush=True)


def report(got: dict[str, tuple[list[float], list[float]]], level: int, args: argparse.Namespace) -> None:
    print(f"\n{level} streams, {args.mode}, {args.rounds} rounds (fixture: 20 ms to the first chunk, 20 ms apart)")
    base = {k: np.percentile(got["direct"][k], [50, 99]) for k in (0, 1)}
    added: dict[str, list[float]] = {}
    for name, (ttfts, itls) in got.items():
        t50, t99 = np.percentile(ttfts, [50, 99])
        i50, i99 = np.percentile(itls, [50, 99]) if itls else (float("nan"),) * 2
        line = f"{name:34s} n={len(ttfts):6d}  TTFT p50 {t50:8.3f} p99 {t99:8.3f}  ITL p50 {i50:7.3f} p99 {i99:7.3f}"
        if name != "direct":
            added[name] = [t50 - base[0][0], t99 - base[0][1], i50 - base[1][0], i99 - base[1][1]]
            a = added[name]
            line += f"  | added TTFT p50 {a[0]:+8.3f} p99 {a[1]:+8.3f}  ITL p50 {a[2]:+7.3f} p99 {a[3]:+7.3f}"
        print(line, flush=True)
    theirs = next((v for k, v in added.items() if k.startswith("LiteLLM")), None)
    for name, ours in added.items():
        if theirs is None or name.startswith("LiteLLM"):
            continue
        ratios = [f"{q} {t / o:.1f}x" if o > 0 else f"{q} inf" for q, o, t in
                  zip(("TTFT p50", "TTFT p99"), ours[:2], theirs[:2], strict=True)]  # fmt: skip
        print(f"LiteLLM adds / {name} adds at {level} streams: {', '.join(ratios)}", flush=True)


if __name__ == "__main__":
    main()
