"""On the GPU host: where the ceiling is at 64-1024 streams. Every tool's run is wrapped so the engine's own
generation-token counter is sampled beside it (every 0.25 s; its rate is taken while the counter moves).

usage: python bench_scale.py wrap OUT NAME URL -- CMD ...        (CMD's output to OUT/NAME.txt, engine rate to
                                                                 OUT/NAME.engine.json, its series every 0.25 s
                                                                 to OUT/NAME.series.json.gz)
       python bench_scale.py servelab OUT NAME URL LEVEL WORKERS [N] (servelab's library: synthetic:128:256 at LEVEL
                                                                 streams, N requests (2 x LEVEL); OUT/NAME.json;
                                                                 CONFIRM=1: a client verdict tested, bench --confirm)
       python bench_scale.py table DIR [DIR ...]                  (markdown: each tool's rate beside the engine's)
"""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from api_balance import busiest_share  # beside this script

# the engine's series kept beside every run (summed over labels): its token counters, its running and waiting
# gauges, its steps (iteration_tokens: count = engine steps, sum = tokens they processed) and its inter-token time
SERIES = (
    "generation_tokens_total", "prompt_tokens_total", "num_requests_running", "num_requests_waiting",
    "iteration_tokens_total_count", "iteration_tokens_total_sum", "inter_token_latency_seconds_count",
    "inter_token_latency_seconds_sum",
)  # fmt: skip
LINE = re.compile(r"^vllm:(" + "|".join(SERIES) + r")(?:\{[^}]*\})? ([0-9.e+-]+)$", re.M)


def engine_series(url: str) -> dict[str, float] | None:
    try:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    got: dict[str, float] = {}
    for name, value in LINE.findall(text):
        got[name] = got.get(name, 0.0) + float(value)
    return got if "generation_tokens_total" in got else None


def main_rate(samples: list[tuple[float, float]], window: int = 4) -> float | None:
    """The counter's rate over the run's main phase: from the first to the last 1 s window whose rate is at least
    half the highest (a tool's warm-up request, its tokenizer loading and its ramp-down are left out)."""
    rates = [
        ((samples[i + window][1] - samples[i][1]) / (samples[i + window][0] - samples[i][0]), i)
        for i in range(len(samples) - window)
    ]
    if not rates or max(r for r, _ in rates) <= 0:
        return None
    peak = max(r for r, _ in rates)
    busy = [i for r, i in rates if r >= peak / 2]
    (t0, v0), (t1, v1) = samples[busy[0]], samples[busy[-1] + window]
    return (v1 - v0) / (t1 - t0)


def wrap(out: Path, name: str, url: str, cmd: list[str]) -> None:
    series: list[dict[str, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            if (got := engine_series(url)) is not None:
                series.append({"t": time.perf_counter(), **got})
            done.wait(0.25)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    with (out / f"{name}.txt").open("w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - start
    done.set()
    thread.join()
    samples = [(row["t"], row["generation_tokens_total"]) for row in series]
    (out / f"{name}.series.json.gz").write_bytes(gzip.compress(json.dumps(series).encode()))
    got = {"name": name, "rc": rc, "wall_s": wall, "engine_tok_s": main_rate(samples), "samples": len(samples)}
    (out / f"{name}.engine.json").write_text(json.dumps(got))
    print(json.dumps(got), flush=True)


def servelab(out: Path, name: str, url: str, level: int, workers: int, requests: int) -> None:
    from servelab.bench import Load, expand, resolve_targets, run_bench
    from servelab.core.store import RunStore

    scenario = replace(expand(["synthetic:128:256"])[0], concurrency=level)
    load = Load(requests=requests, warmup=1, workers=workers, max_in_flight=4096)
    confirm = os.environ.get("CONFIRM") == "1"  # a client verdict tested with twice the load processes
    result = run_bench(
        RunStore(out / "runs.sqlite"), resolve_targets([("vllm", url)]), [scenario], load, confirm=confirm
    )
    (step,) = result.stored.steps
    s = step.summary
    got = {
        "name": name,
        "level": level,
        "workers": workers,
        "ok": s.ok,
        "requests": s.requests,
        "tok_s": s.aggregate_tok_s,
        "ttft_p50_ms": s.ttft_ms.get("p50"),
        "ttft_p99_ms": s.ttft_ms.get("p99"),
        "itl_p50_ms": s.itl_ms.get("p50"),
        "bottleneck": step.bottleneck.model_dump() if step.bottleneck else None,
        "clients": [c.model_dump() for c in step.clients],
    }
    (out / f"{name}.json").write_text(json.dumps(got, indent=1))
    print(json.dumps({k: got[k] for k in ("name", "ok", "tok_s", "ttft_p50_ms")}), step.bottleneck, flush=True)


def _tool_rate(d: Path, name: str) -> tuple[float | None, float | None, str]:
    """The tool's own throughput, median TTFT and (servelab) verdict, from what it saved."""
    if (d / f"{name}.json").exists() and name.startswith("servelab"):
        got = json.loads((d / f"{name}.json").read_text())
        b = got.get("bottleneck") or {}
        near = f" ({', '.join(b['near'])} near too)" if b.get("near") else ""
        return got["tok_s"], got["ttft_p50_ms"], f"{b.get('limit', '-')}{near}: {b.get('reason', '')}"
    if name.startswith("vllm") and (d / f"{name}.json").exists():
        got = json.loads((d / f"{name}.json").read_text())
        return got.get("output_throughput"), got.get("median_ttft_ms"), ""
    for path in (d / f"{name}.json", d / f"{name}.json.gz"):
        if name.startswith("guidellm") and path.exists():
            return _guidellm(path)
    return None, None, "(no result)"


def _guidellm(path: Path) -> tuple[float | None, float | None, str]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    requests = json.loads(text)["benchmarks"][0]["requests"]["successful"]
    timings = [r["info"]["timings"] for r in requests]
    start = min(t["request_start"] for t in timings)
    end = max(t["last_token_iteration"] for t in timings)
    tokens = sum(int(t["token_iterations"]) for t in timings)
    ttft = statistics.median((t["first_token_iteration"] - t["request_start"]) * 1000 for t in timings)
    return tokens / (end - start), ttft, ""


def table(dirs: list[Path]) -> None:
    print("| API servers | streams | tool | tool's tok/s | engine's tok/s | median TTFT ms | busiest API server | "
          "servelab's verdict |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for d in dirs:
        api = (d / "api-servers").read_text().strip() if (d / "api-servers").exists() else "?"
        shares = busiest_share(d) if api not in ("1", "?") else {}
        for eng in sorted(d.glob("*.engine.json"), key=_order):
            name = eng.name.removesuffix(".engine.json")
            rate = json.loads(eng.read_text()).get("engine_tok_s")
            tool, ttft, verdict = _tool_rate(d, name)
            level = name.rpartition("-c")[2]
            share = f"{shares[name]:.0%}" if name in shares else "-"
            print(f"| {api} | {level} | {name.rpartition('-c')[0]} | {_f(tool)} | {_f(rate)} | {_f(ttft)} | "
                  f"{share} | {verdict} |")  # fmt: skip


def _order(p: Path) -> tuple[int, str]:
    name = p.name.removesuffix(".engine.json")
    return int(name.rpartition("-c")[2] or 0), name


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


if __name__ == "__main__":
    what, *rest = sys.argv[1:]
    if what == "wrap":
        split = rest.index("--")
        out, name, url = rest[:split]
        wrap(Path(out), name, url, rest[split + 1 :])
    elif what == "servelab":
        out, name, url, level, workers, *requests = rest
        servelab(Path(out), name, url, int(level), int(workers), int(requests[0]) if requests else 2 * int(level))
    else:
        table([Path(d) for d in rest])
