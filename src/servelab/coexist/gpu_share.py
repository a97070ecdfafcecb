"""What the GPU did during each coexist condition: the NVML samples (on the run clock) inside the condition's probe
segments, as the device's SM busy, power and memory, and each GPU process's SM share, to set beside the probe's
lateness. A condition whose segments hold no sample has no figures (a run with no GPU, or segments shorter than the
sampling interval)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from servelab.engines.gpu_telemetry import GpuTelemetry


def gpu_summary(telemetry: GpuTelemetry, segments: Sequence[tuple[str, float, float]]) -> dict[str, Any]:
    """The run's stored telemetry with its probe segments (condition, start, end: ``time.perf_counter()`` seconds,
    the sampler's clock) as windows in seconds from the sampler's start."""
    t0 = telemetry.t0_ns / 1e9
    windows = [{"condition": name, "start_s": start - t0, "end_s": end - t0} for name, start, end in segments]
    return telemetry.stored() | {"windows": windows}


def condition_gpu(stored: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per condition: the samples inside its windows, each GPU's mean SM busy, the GPUs' mean power together, the
    most memory one used, and per process its mean SM share over the samples NVML gave for it there, largest
    first."""
    out: dict[str, dict[str, Any]] = {}
    windows = stored.get("windows") or []
    for name in dict.fromkeys(w["condition"] for w in windows):
        spans = [(w["start_s"], w["end_s"]) for w in windows if w["condition"] == name]

        def inside(t: float, spans: list[tuple[float, float]] = spans) -> bool:
            return any(a <= t <= b for a, b in spans)

        samples = [s for s in stored.get("samples") or [] if inside(s["t_s"])]
        if not samples:
            continue
        shares: dict[int, list[float]] = {}
        for p in stored.get("processes") or []:
            if inside(p["t_s"]):
                shares.setdefault(int(p["pid"]), []).append(float(p["sm_util"]))
        names = stored.get("process_names") or {}
        processes = [{"pid": pid, "name": str(names.get(str(pid), "?")), "sm_share": statistics.fmean(v),
                      "samples": len(v)} for pid, v in shares.items()]  # fmt: skip
        gpus = sorted({int(s["gpu"]) for s in samples})
        mine = {g: [s for s in samples if int(s["gpu"]) == g] for g in gpus}
        out[name] = {
            "samples": len(samples),
            "sm_busy": {g: statistics.fmean(s["sm_util"] for s in mine[g]) for g in gpus},  # each GPU's own
            "power_w": sum(statistics.fmean(s["power_w"] for s in mine[g]) for g in gpus),  # all GPUs together
            "mem_used_max_bytes": max(s["mem_used_bytes"] for s in samples),
            "processes": sorted(processes, key=lambda p: -p["sm_share"]),
        }
    return out
