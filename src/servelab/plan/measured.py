"""Measured decode speeds read from stored runs, as points the speed constants are fitted to (plan/fit.py).

A point is one closed-loop step of a stored bench run (a sweep's points are bench steps too) with successful
requests: its concurrency, the mean length a stream held while decoding (the mean prompt the server counted
plus half the mean output) and the median per-stream tok/s. Open-loop, session, warm-up and cold/warm steps
are left out: their concurrency is not the step's. ``RUN:TARGET`` picks one target of a run of several.
"""

from __future__ import annotations

from servelab.core.errors import UsageError
from servelab.core.results import BenchRun, RunResult, load_result
from servelab.core.results.bench import Step
from servelab.core.results.sweep import SweepRun
from servelab.core.store import RunInfo, RunStore
from servelab.plan.budget import PlanRequest, scheme_of, weights_for
from servelab.plan.draft import fold_draft
from servelab.plan.fit import Fit, Measured, fit_constants
from servelab.plan.quant import kv_dtype_bytes
from servelab.plan.resolve import Resolved
from servelab.plan.speed import Constants, workload

BENCH_RUN_KINDS = ("bench", "bench-slo")
FIT_KINDS = (*BENCH_RUN_KINDS, "sweep")


def _point(step: Step, run_id: str) -> Measured | None:
    labels, summary = step.labels, step.summary
    if labels.rate is not None or labels.phase is not None or step.sessions is not None or not summary.ok:
        return None
    tok_s = summary.stream_tok_s.get("p50")
    if not tok_s:
        return None
    prompt, output = summary.input_tokens / summary.ok, summary.output_tokens / summary.ok
    return Measured(labels.level or 1, round(prompt + output / 2), float(tok_s), f"{run_id} {step.scenario}")


def points_from_runs(store: RunStore, refs: list[str]) -> list[Measured]:
    """Every usable step of the runs named (id, unique prefix or 'latest', each optionally ``:TARGET``; a sweep's
    ``:point-N`` is that point's bench run, and a sweep of several measured points must name one: its points are
    different configurations, one speed model each)."""
    points: list[Measured] = []
    for ref in refs:
        run_ref, _, target = ref.partition(":")
        info = store.get_run(run_ref, kinds=FIT_KINDS)
        result = load_result(store, info)
        if isinstance(result, SweepRun):
            info, result = _sweep_point(store, result, info.run_id, target)
        if not isinstance(result, BenchRun):
            raise UsageError(f"run {info.run_id} is a {info.kind} run: --fit reads bench (and sweep) runs")
        targets = sorted({s.target for s in result.steps})
        if not target and len(targets) > 1:
            raise UsageError(f"run {info.run_id} measured {len(targets)} targets: name one",
                             hint=" or ".join(f"{info.run_id}:{t}" for t in targets))  # fmt: skip
        if target and target not in targets:
            raise UsageError(f"run {info.run_id} has no target {target!r}", hint=", ".join(targets))
        found = [p for s in result.steps if not target or s.target == target if (p := _point(s, info.run_id))]
        if not found:
            raise UsageError(f"run {info.run_id} has no closed-loop step with a measured decode speed to fit")
        points += found
    return points


def _sweep_point(store: RunStore, sweep: SweepRun, run_id: str, target: str) -> tuple[RunInfo, RunResult | None]:
    """The bench run of the sweep's point ``target`` (``point-N``), or of its only measured point."""
    # the first bench run holds the closed-loop steps a fit reads (session steps are never fitted)
    measured = {f"point-{p.index}": p.bench_runs()[0] for p in sweep.points
                if p.status == "measured" and p.bench_runs()}  # fmt: skip
    if not measured:
        raise UsageError(f"sweep {run_id} has no measured point to fit")
    if not target and len(measured) > 1:
        raise UsageError(f"sweep {run_id} measured {len(measured)} configurations: name the one to fit",
                         hint=" or ".join(f"{run_id}:{name}" for name in measured))  # fmt: skip
    name = target or next(iter(measured))
    if name not in measured:
        raise UsageError(f"sweep {run_id} has no measured {name!r}", hint=", ".join(measured))
    info = store.get_run(measured[name], kinds=BENCH_RUN_KINDS)
    return info, load_result(store, info)


def fit_from_runs(
    resolved: Resolved, req: PlanRequest, store: RunStore, refs: list[str], hold_out: frozenset[int] | None = None
) -> Fit:
    """The card's speed constants fitted to the runs' measured steps of this model (the plan's weights, KV dtype
    and tensor parallelism), from the request's peaks."""
    if not (req.bandwidth_gbs and req.tflops):
        raise UsageError("--fit needs the card's peak bandwidth and FLOPs: give --gpu, not --gpu-mem")
    resolved, _ = fold_draft(resolved, req.engine, req.engine_args)
    weights = weights_for(resolved, req)
    work = workload(resolved.spec, weights, scheme_of(resolved, req), kv_dtype_bytes(req.kv_dtype), req.tp)
    return fit_constants(work, Constants(req.bandwidth_gbs, req.tflops), points_from_runs(store, refs), hold_out)
