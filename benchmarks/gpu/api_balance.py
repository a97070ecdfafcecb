"""How one bench-at-scale folder's runs spread over vLLM's API-server processes, from the server's own access log.

With ``--api-server-count N`` vLLM's API servers share one listening socket (``setup_server`` in the parent, the
socket handed to each process): a connection goes to whichever process accepts it first, and a request stays on
its connection's process. So the busiest API server's share of the requests (and of the connections) is set by the
client's connection pattern: one connection per request spreads them as they arrive; a keep-alive pool opened at
once can land most of its connections on one or two processes. Each run's POSTs in ``serve.log`` (uvicorn's access
lines, prefixed ``(ApiServer_K pid=...)``) form one block between the probes the tools send first (/v1/models,
/version, /tokenize, /health); blocks are named in the order of the folder's step.log.

usage: python benchmarks/gpu/api_balance.py DIR [DIR ...]   (DIR holds serve.log or serve.log.gz and step.log)
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

ACCESS = re.compile(r'\(ApiServer_(\d+) pid=\d+\) INFO:\s+[\d.]+:(\d+) - "(\w+) (\S+)')
MIN_BLOCK = 50  # fewer POSTs than this between probes: a warm-up, not a run


def _lines(folder: Path) -> list[str]:
    if (folder / "serve.log").exists():
        return (folder / "serve.log").read_text(errors="replace").splitlines()
    with gzip.open(folder / "serve.log.gz", "rt", errors="replace") as f:
        return f.read().splitlines()


def blocks(lines: list[str]) -> list[tuple[Counter[str], dict[str, set[str]]]]:
    """Requests and client ports per API server, for each run of generation POSTs between probes."""
    out: list[tuple[Counter[str], dict[str, set[str]]]] = []
    current: tuple[Counter[str], dict[str, set[str]]] | None = None
    for line in lines:
        if not (m := ACCESS.match(line)):
            continue
        server, port, _, url = m.groups()
        if url.startswith(("/v1/chat/completions", "/v1/completions")):
            if current is None:
                current = (Counter(), defaultdict(set))
                out.append(current)
            current[0][server] += 1
            current[1][server].add(port)
        elif not url.startswith("/metrics"):
            current = None
    return [b for b in out if sum(b[0].values()) >= MIN_BLOCK]


def _names(folder: Path) -> list[str]:
    """The runs in the order they ran; a servelab step confirmed with more load processes (CONFIRM=1: its
    verdict's ``relieved``) ran twice, its second run named ``NAME (confirm)``."""
    log = folder / "step.log"
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.startswith('{"name"')] if log.exists() else []
    return [run for r in rows for run in (r["name"], *_confirm(folder, r["name"]))]


def _confirm(folder: Path, name: str) -> list[str]:
    saved = folder / f"{name}.json"
    if not name.startswith("servelab") or not saved.exists():
        return []
    verdict = json.loads(saved.read_text()).get("bottleneck") or {}
    return [f"{name} (confirm)"] if verdict.get("relieved") else []


def busiest_share(folder: Path) -> dict[str, float]:
    """Each named run's busiest API server's share of its requests; empty without a log or when the blocks and the
    step.log's runs do not pair up."""
    if not any((folder / f).exists() for f in ("serve.log", "serve.log.gz")):
        return {}
    found = blocks(_lines(folder))
    labels = _labels(folder, len(found))
    return {name: max(reqs.values()) / sum(reqs.values()) for name, (reqs, _) in zip(labels, found, strict=True)}


def _labels(folder: Path, count: int) -> list[str]:
    """The step.log's run names for ``count`` blocks; a run the log lacks at its end (a budget cut it before its
    line) is ``block N``; any other mismatch names them all ``block N``."""
    names = _names(folder)
    if len(names) > count:
        names = []
    return names + [f"block {i + 1}" for i in range(len(names), count)]


def main(dirs: list[str]) -> None:
    print("| API servers | run | requests | busiest API server's share | of connections | requests per server |")
    print("|---|---|---|---|---|---|")
    for folder in map(Path, dirs):
        api = (folder / "api-servers").read_text().strip()
        if not any((folder / f).exists() for f in ("serve.log", "serve.log.gz")):
            print(f"| {api} | {folder}: no serve.log (the server was started by an earlier call) | | | | |")
            continue
        found = blocks(_lines(folder))
        for label, (reqs, ports) in zip(_labels(folder, len(found)), found, strict=True):
            n, conns = sum(reqs.values()), [len(v) for v in ports.values()]
            spread = "/".join(str(reqs[k]) for k in sorted(reqs))
            print(f"| {api} | {label} | {n:,} | {max(reqs.values()) / n:.0%} | "
                  f"{max(conns) / sum(conns):.0%} ({sum(conns):,}) | {spread} |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
