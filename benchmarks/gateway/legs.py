"""Where a proxy's added TTFT goes, leg by leg: one stream, requests spaced apart (each path's process has gone
to sleep before its next request: the case of a voice turn, not of a closed loop), paths interleaved request by
request so that a drifting machine moves them all alike; or, with ``--blocks N``, each path's requests back to
back (``--gap-ms`` apart) in N blocks, the paths taking turns (a closed loop).

The upstream stamps the moment it has read the whole request and the moment it writes the first chunk (both
``perf_counter_ns``, one clock for every process of the host), 20 ms apart. So for each request:
  request leg = upstream read - client send; answer leg = client read of the first chunk - upstream write.
Direct is the client to the upstream; every other path adds its own legs. Printed: medians per path, and what
each adds to direct's, leg by leg.

usage: python benchmarks/gateway/legs.py [--requests 300] [--gap-ms 5] [--relay] [--blocks N]
       [--variant LABEL=JSON ...]   (a servelab gateway, 1 worker, with [server] fields from JSON; default: one
                                     with the config's defaults) [--compare LABEL=SRC ...] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import GATEWAY, KEY, RELAY, Cores

from servelab.core.paths import servelab_home
from servelab.testing import free_port

# fmt: off
UPSTREAM = r"""
import asyncio, sys, time
import uvloop
DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
async def handle(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            size = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")), 0)
            if head.startswith(b"GET"):
                body = b'{"object":"list","data":[{"id":"fixture","object":"model"}]}'
                w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
                continue
            await r.readexactly(size)
            recv = time.perf_counter_ns()
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            await asyncio.sleep(0.02)
            event = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%d:%d"},"finish_reason":null}]}\n\n' % (recv, time.perf_counter_ns())
            w.write(b"%x\r\n%s\r\n" % (len(event), event) + DONE)
    except (ConnectionError, asyncio.IncompleteReadError):
        w.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
uvloop.run(main())
"""  # noqa: E501
# fmt: on
BODY = json.dumps(
    {"model": "fixture", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stream": True}
).encode()  # fmt: skip
MARK = b'"content":"'


class Path_:
    def __init__(self, name: str, port: int) -> None:
        self.name, self.port = name, port
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer {KEY}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(BODY)}\r\n\r\n")  # fmt: skip
        self.request = head.encode() + BODY
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.legs: list[tuple[float, float, float]] = []

    def one(self) -> tuple[float, float, float]:
        """(request leg, answer leg, TTFT) in microseconds."""
        sent = time.perf_counter_ns()
        self.sock.sendall(self.request)
        got, first = b"", 0
        while not got.endswith(b"0\r\n\r\n"):
            data = self.sock.recv(65536)
            if not data:
                raise SystemExit(f"{self.name}: connection closed")
            if not first and MARK in got[-16:] + data:
                first = time.perf_counter_ns()
            got += data
        at = got.index(MARK) + len(MARK)
        recv, wrote = map(int, got[at : got.index(b'"', at)].split(b":"))
        return (recv - sent) / 1e3, (first - wrote) / 1e3, (first - sent) / 1e3


def start(args: argparse.Namespace, cores: Cores, procs: list[subprocess.Popen[bytes]]) -> dict[str, int]:
    up = subprocess.Popen(cores.argv(cores.upstream, [sys.executable, "-c", UPSTREAM]), stdout=subprocess.PIPE)
    procs.append(up)
    assert up.stdout
    upstream = int(up.stdout.readline())
    ports = {"direct": upstream}
    own = iter([cores.proxy[i : i + 1] for i in range(len(cores.proxy))] + [[]] * 64)  # a core each, where any
    if args.relay:
        ports["bare TCP relay (uvloop)"] = port = free_port()
        argv = [sys.executable, "-c", RELAY, "127.0.0.1", str(upstream), str(port)]
        procs.append(subprocess.Popen(cores.argv(next(own), argv)))
    trees = [(label, server, None) for label, server in (v.split("=", 1) for v in variants(args))]
    trees += [(label, "{}", src) for label, src in (c.split("=", 1) for c in args.compare or [])]
    for label, server, src in trees:
        ports[label] = port = free_port()
        local = {"url": f"http://127.0.0.1:{upstream}", "health_path": "/v1/models", "tokenizer": args.tokenizer}
        config = {"host": "127.0.0.1", "port": port, "policy": {"health_interval_s": 5}, "keys": {"clients": [KEY]},
                  "local": local, "server": {"access_log": False, **json.loads(server)}}  # fmt: skip
        argv = [sys.executable, "-c", GATEWAY, json.dumps(config), "1"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])} if src else None
        procs.append(subprocess.Popen(cores.argv(next(own), argv), stderr=subprocess.DEVNULL, env=env))
    return ports


def variants(args: argparse.Namespace) -> list[str]:
    return list(args.variant or ["servelab gateway={}"])


def connect(ports: dict[str, int]) -> list[Path_]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return [Path_(name, port) for name, port in ports.items()]
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--gap-ms", type=float, default=5.0, help="pause after each request (every path's)")
    ap.add_argument("--relay", action="store_true")
    ap.add_argument("--blocks", type=int, default=0, help="each path's requests in this many blocks, not one by one")
    ap.add_argument("--variant", action="append", metavar="LABEL=JSON")
    ap.add_argument("--compare", action="append", metavar="LABEL=SRC", help="a gateway from another servelab tree")
    ap.add_argument(
        "--tokenizer",
        default=str(servelab_home() / "models" / "smollm2-135m-instruct"),
        help="the model folder the gateway counts prompts with (the fixture has no /tokenize)",
    )
    args = ap.parse_args()
    cores = Cores(len(variants(args)) + len(args.compare or []) + args.relay)
    if cores.pinned:
        os.sched_setaffinity(0, cores.load[:1])
    print(f"one stream, {args.gap_ms:g} ms between requests; {cores.describe()}", flush=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        paths = connect(start(args, cores, procs))
        for path in paths:
            for _ in range(20):
                path.one()
        if args.blocks:  # each path's requests back to back in blocks (a closed loop), the paths taking turns
            for _ in range(args.blocks):
                for path in paths:
                    for _ in range(args.requests // args.blocks):
                        path.legs.append(path.one())
                        time.sleep(args.gap_ms / 1e3)
        else:
            for _ in range(args.requests):
                for path in paths:
                    path.legs.append(path.one())
                    time.sleep(args.gap_ms / 1e3)
    finally:
        for p in procs:
            p.terminate()
    report(paths)


def report(paths: list[Path_]) -> None:
    medians = {p.name: [statistics.median(leg[i] for leg in p.legs) for i in range(3)] for p in paths}
    base = medians["direct"]
    for name, (req, ans, ttft) in medians.items():
        line = f"{name:44s} n={len(paths[0].legs):5d}  request leg {req:7.1f} us  answer leg {ans:7.1f} us"
        if name != "direct":
            added = (ttft - base[2], req - base[0], ans - base[1])
            line += "  | added: TTFT {:+7.1f} us (request {:+6.1f}, answer {:+6.1f})".format(*added)
        print(line, flush=True)


if __name__ == "__main__":
    main()
