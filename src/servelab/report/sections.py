"""One report section per stored run, from its typed result: the tables side by side, the verdict lines a person
wants, what failed, and (for HTML) the plots. The console, HTML and Markdown all render these sections."""

from __future__ import annotations

import itertools
from typing import Any

from servelab.core.results import (
    BenchRun,
    CheckRun,
    CoexistRun,
    EvalRun,
    PlanRun,
    RepoRun,
    RunResult,
    SweepRun,
    load_result,
)
from servelab.core.store import RunInfo, RunStore
from servelab.report.bench_view import bench
from servelab.report.coexist_view import coexist_section
from servelab.report.eval_view import eval_section, repo_section
from servelab.report.gpu_view import add_condition_gpu_table, add_gpu_tables, point_telemetry
from servelab.report.model import Section, Table, add_plot, fmt
from servelab.report.plan_view import check_section, plan_section

MANIFEST_KEYS = ("servelab_version", "kind", "created_at", "host", "gpus", "targets", "args", "sharing")


def section(store: RunStore, info: RunInfo, *, with_plots: bool = True) -> Section:
    out = Section(info.run_id, info.kind, f"{info.kind} {info.run_id}", info.status, _manifest(info.manifest))
    out.facts = facts(info, store.failed_count(info.run_id), store.cancelled_count(info.run_id))
    if info.status != "complete":
        what = f" ({info.error})" if info.error else ""
        out.problems.append(f"the run ended {info.status}{what}: what is below is what was measured before that")
    result = load_result(store, info)
    if result is None:
        _generic(out, store.summaries(info.run_id))
    else:
        _render(out, store, info, result, with_plots)
    return out


def _render(out: Section, store: RunStore, info: RunInfo, result: RunResult, with_plots: bool) -> None:
    out.result = result
    match result:
        case BenchRun():
            bench(out, result, store.records(info.run_id) if with_plots else None)
            add_gpu_tables(out, store.summaries(info.run_id))
        case EvalRun():
            eval_section(out, result, with_plots)
        case RepoRun():
            repo_section(out, result)
        case CoexistRun():
            coexist_section(out, result)
            summaries = store.summaries(info.run_id)
            add_gpu_tables(out, summaries)
            add_condition_gpu_table(out, result, summaries)
            if with_plots:
                _coexist_plot(out, store, info)
        case PlanRun():
            plan_section(out, result)
        case CheckRun():
            check_section(out, result)
        case SweepRun():
            from servelab.report.sweep_view import sweep_section

            sweep_section(out, result, with_plots, point_telemetry(store, result))
    out.problems[:0] = [f"FAILED: {line}" for line in result.request_failures()]  # first: what a figure lacks
    if result.error and info.status == "failed" and not any(result.error in p for p in out.problems):
        out.problems.append(result.error)


def _coexist_plot(out: Section, store: RunStore, info: RunInfo) -> None:
    from servelab.coexist import stored_result
    from servelab.report.coexist_plots import interval_png, interval_series
    from servelab.report.plots import too_few

    result = stored_result(store, info.run_id)
    add_plot(out, "Chunk intervals per condition", interval_png(result), too_few(interval_series(result)))


def facts(info: RunInfo, failed: int, cancelled: int = 0) -> list[tuple[str, str]]:
    """What the run measured, first: each target's model, address and engine build, the hardware, the error rate."""
    out = []
    targets = info.manifest.get("targets")
    for name, t in (targets if isinstance(targets, dict) else {}).items():
        if not isinstance(t, dict):
            continue
        models = [m.get("id") for m in t.get("models") or [] if isinstance(m, dict)]
        build = t.get("server_version") or t.get("server_header") or "unknown build"
        engine = f"vLLM {build}" if t.get("server_version") else str(build)
        out.append(
            (f"target {name}", f"{models[0] if models else t.get('models_error', '?')} at {t.get('url')} ({engine})")
        )
    out.append(("hardware", _hardware(info.manifest)))
    n = info.record_count - cancelled  # a request the run cut off as planned is neither a failure nor a success
    out.append(("requests failed", f"{failed} of {n} ({failed / n:.1%})" if n else "no requests"))
    if cancelled:
        out.append(("requests cut off", f"{cancelled}, as planned, at the end of a load window (not failures)"))
    return out


def _hardware(manifest: dict[str, Any]) -> str:
    gpus = [g.get("name", "?") for g in manifest.get("gpus") or [] if isinstance(g, dict)]
    found = manifest.get("host")
    host: dict[str, Any] = found if isinstance(found, dict) else {}
    cpu = f"{host.get('cpu_count', '?')} CPU cores, {host.get('memory_gib', '?')} GiB"
    return (f"{len(gpus)} x {gpus[0]}, " if gpus else "no GPU, ") + cpu + f" on {host.get('hostname', '?')}"


def _manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    keep = {k: manifest[k] for k in MANIFEST_KEYS if k in manifest}
    return keep or manifest


def _generic(out: Section, summaries: dict[str, dict[str, Any]]) -> None:
    """A run with no typed result (a kind from an old servelab): its named figures as they were stored."""
    for name, s in itertools.islice(summaries.items(), 20):
        flat = [[k, fmt(v) if not isinstance(v, dict | list) else "…"] for k, v in s.items()]
        out.tables.append(Table(name, ["figure", "value"], flat))
