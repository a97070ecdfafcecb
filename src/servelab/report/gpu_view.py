"""NVML telemetry a run kept (``bench/gpu``, ``coexist/gpu``) as tables: per GPU over the whole run, and per sweep
point beside its flags. A run on a host with no visible GPU gets no table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servelab.coexist import condition_gpu
from servelab.core.figures import fmt_number
from servelab.core.results import CoexistRun
from servelab.core.results.sweep import SweepRun
from servelab.core.store import RunStore
from servelab.report.model import Section, Table

GPU_SUMMARIES = ("bench/gpu", "coexist/gpu")
GPU_HEADERS = ["gpu", "samples", "SM busy", "memory busy", "memory used (max)", "power (mean)", "energy"]
NOTE = ("NVML, sampled on the run clock over the whole run: SM busy and memory busy are the mean share of each "
        "sample window a kernel ran or memory was read or written; energy from the card's counter (else power "
        "integrated)")  # fmt: skip


def gpu_rows(telemetry: dict[str, Any]) -> list[list[str]]:
    """A row per GPU the telemetry sampled."""
    rows = []
    for index, g in sorted((telemetry.get("gpus") or {}).items()):
        rows.append([f"{index}: {g.get('name', '?')}", str(g.get("samples", 0)), _percent(g.get("sm_util_mean")),
                     _percent(g.get("mem_util_mean")), _gib(g.get("mem_used_max_bytes")), _watts(g.get("power_w_mean")),
                     _joules(g.get("energy_j"))])  # fmt: skip
    return rows


def add_gpu_tables(out: Section, summaries: dict[str, Any]) -> None:
    """The run's GPU table, with joules per output token where the run counted its output (none where no GPU was
    sampled: the run said why when it ran)."""
    for name in GPU_SUMMARIES:
        telemetry = summaries.get(name)
        if not isinstance(telemetry, dict):
            continue
        rows = gpu_rows(telemetry)
        if rows:
            per_token = telemetry.get("joules_per_output_token")
            extra = f"; {per_token:.3g} J per output token (all GPUs)" if per_token else ""
            out.tables.append(Table("GPU telemetry", GPU_HEADERS, rows, note=NOTE + extra))


def point_gpu_text(telemetry: dict[str, Any] | None) -> str:
    """One sweep point's GPU figures in a cell: mean power, peak memory used, SM busy and J per output token."""
    if not telemetry or not telemetry.get("gpus"):
        return "-"
    parts = [f"gpu {i}: {_watts(g.get('power_w_mean'))}, {_gib(g.get('mem_used_max_bytes'))} used, "
             f"SM {_percent(g.get('sm_util_mean'))}" for i, g in sorted(telemetry["gpus"].items())]  # fmt: skip
    per_token = telemetry.get("joules_per_output_token")
    if per_token:
        parts.append(f"{per_token:.3g} J per output token")
    return "\n".join(parts)


def point_telemetry(store: RunStore, result: SweepRun) -> dict[int, dict[str, Any]]:
    """Each measured point's NVML telemetry, from its bench run (a point whose run is gone has none)."""
    found: dict[int, dict[str, Any]] = {}
    for p in result.points:
        for run in p.bench_runs():  # request and session scenarios: two runs, the first sampled
            telemetry = store.summaries(run).get("bench/gpu")
            if isinstance(telemetry, dict) and telemetry.get("gpus") and p.index not in found:
                found[p.index] = telemetry
    return found


def add_point_gpu_table(out: Section, result: SweepRun, telemetry: dict[int, dict[str, Any]]) -> None:
    """Power, memory and energy per measured point, beside its flags."""
    rows = [[str(p.index), p.key, point_gpu_text(telemetry[p.index])] for p in result.points if p.index in telemetry]
    if rows:
        note = NOTE + "; J per output token: the bench's energy over its output tokens"
        out.tables.append(Table("GPU per point", ["point", "flags", "NVML over the point's bench"], rows, note=note))


def add_condition_gpu_table(out: Section, result: CoexistRun, summaries: dict[str, Any]) -> None:
    """Coexist: per condition the probe's lateness beside what the GPU did then, and each GPU process's SM share."""
    stored = summaries.get("coexist/gpu")
    by_condition = condition_gpu(stored) if isinstance(stored, dict) else {}
    if not by_condition:
        return
    rows = []
    for name, gpu in by_condition.items():
        late = [f"{c.probe or 'probe'}: {fmt_number(c.lateness_p99_ms, 0)} ms" for c in result.conditions
                if c.condition == name and c.probe and c.lateness_p99_ms is not None]  # fmt: skip
        shares = [f"{p['pid']} {Path(p['name']).name}: {p['sm_share']:.0f}%" for p in gpu["processes"][:4]]
        busy = gpu["sm_busy"]
        sm = _percent(next(iter(busy.values()))) if len(busy) == 1 else "\n".join(
            f"{g}: {_percent(v)}" for g, v in busy.items())  # fmt: skip
        rows.append([name, "\n".join(late) or "-", sm, _watts(gpu["power_w"]),
                     _gib(gpu["mem_used_max_bytes"]), "\n".join(shares) or "-", str(gpu["samples"])])  # fmt: skip
    note = ("NVML samples inside each condition's probe segments: each GPU's SM busy (mean), the GPUs' power "
            "together (mean), the most memory one used; each GPU process's SM share is NVML's per-process "
            "utilisation, its mean over the samples the driver took for it there (pid and executable); late: the "
            "probe's lateness p99")  # fmt: skip
    out.tables.append(Table("The GPU during each condition", ["condition", "late p99", "SM busy", "power",
                            "memory used", "SM share by process", "samples"], rows, note=note))  # fmt: skip


def _percent(value: float | None) -> str:
    return f"{value:.0f}%" if isinstance(value, int | float) else "-"


def _gib(value: float | None) -> str:
    return f"{value / 2**30:.2f} GiB" if isinstance(value, int | float) else "-"


def _watts(value: float | None) -> str:
    return f"{fmt_number(value, 0)} W" if isinstance(value, int | float) else "-"


def _joules(value: float | None) -> str:
    return f"{fmt_number(value, 0)} J" if isinstance(value, int | float) else "-"
