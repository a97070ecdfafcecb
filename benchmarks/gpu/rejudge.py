"""Re-judge stored H200 bench-at-scale steps with the current verdict rules, offline.

Each servelab step's records and load processes come from its run store; its /metrics samples are rebuilt from
what the store kept (running, waiting, KV, generated tokens at each scrape), with the engine's inter-token-time sum
taken from the 0.25 s series that bench_scale.py's wrapper sampled beside the step on the same host clock
(NAME.series.json.gz, linearly interpolated) and its queue and prefill time from the step's stored means; the
frontend's CPU is the stored figure. What the store did not keep (the server's TTFT sums) is left out, so the rule
from the server's own TTFT outside queue and prefill cannot fire here.

usage: PYTHONPATH=src python benchmarks/gpu/rejudge.py RUNS.sqlite SERIES_DIR [RUNS.sqlite SERIES_DIR ...]
"""

from __future__ import annotations

import bisect
import gzip
import json
import sys
from pathlib import Path

from servelab.bench import bottleneck
from servelab.bench.metrics import SERIES, Sample
from servelab.core.results import BenchRun, load_result
from servelab.core.store import RunStore

ITL = "vllm:inter_token_latency_seconds_sum"


def _interp(points: list[tuple[float, float]], at: float) -> float:
    times = [t for t, _ in points]
    i = bisect.bisect_left(times, at)
    if i <= 0:
        return points[0][1]
    if i >= len(points):
        return points[-1][1]
    (t0, v0), (t1, v1) = points[i - 1], points[i]
    return v0 + (v1 - v0) * (at - t0) / (t1 - t0)


def _samples(step_metrics: dict, wrapper: list[dict], extra_s: float) -> list[Sample]:
    t0, series = step_metrics["t0_ns"], step_metrics["series"]
    itl = [(row["t"] * 1e9, row["inter_token_latency_seconds_sum"]) for row in wrapper]
    by_time: dict[int, dict[str, float]] = {}
    for figure, points in series.items():
        for t, v in points:
            by_time.setdefault(t0 + int(t * 1e9), {})[SERIES[figure][0]] = v
    times = sorted(by_time)
    out = []
    for i, at in enumerate(times):
        values = dict(by_time[at], **{ITL: _interp(itl, at)})
        values["vllm:request_queue_time_seconds_sum"] = extra_s if i == len(times) - 1 else 0.0
        out.append(Sample(at, values))
    return out


def rejudge(db: Path, series_dir: Path) -> None:
    store = RunStore(db)
    for info in store.list_runs():
        stored = load_result(store, info)
        if not isinstance(stored, BenchRun) or not stored.steps:
            continue
        step = stored.steps[0]
        level, workers = step.labels.level, len(step.clients)
        name = f"servelab-x{workers}-c{level}"
        path = series_dir / f"{name}.series.json.gz"
        if step.bottleneck is None or not path.exists():
            continue
        wrapper = json.loads(gzip.decompress(path.read_bytes()))
        raw = json.loads(store.result(info.run_id)[2])["metrics"]["vllm"]  # type: ignore[index]
        old = step.bottleneck.evidence
        records = store.records(info.run_id)
        means = [old.get(k) for k in ("queue_time_mean_ms", "prefill_time_mean_ms")]
        extra = sum(m for m in means if isinstance(m, float)) / 1000 * len(records)
        cpu = old.get("frontend_cpu_max")
        got = bottleneck(records, _samples(raw, wrapper, extra), step.clients, False,
                         [cpu] if isinstance(cpu, float) else [])  # fmt: skip
        ev = got.evidence
        api = (series_dir / "api-servers").read_text().strip()
        row = {"api": api, "step": name, "was": step.bottleneck.limit, "now": got.limit}
        row |= {"held": ev.get("engine_held_share"), "occupancy": ev.get("client_occupancy")}
        print(json.dumps(row | {"reason": got.reason, "note": got.note}))


if __name__ == "__main__":
    args = sys.argv[1:]
    for db, d in zip(args[::2], args[1::2], strict=True):
        rejudge(Path(db), Path(d))
