"""`servelab check`: plan, bench, eval and coexist in that order, each stored as a run, then one report. Each step
can be skipped; a step that fails is recorded with why, and the next steps still run."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servelab.bench import HOLD_WAVES, Load, Target, expand, run_bench
from servelab.core.errors import ServelabError, UsageError
from servelab.core.recorder import RunRecorder, recording
from servelab.core.results import CheckRun, CheckStep, load_result
from servelab.core.store import STATUS_COMPLETE, RunStore
from servelab.engines.manifest import build_manifest, gpu_info
from servelab.report import section

STEPS = ("plan", "bench", "eval", "coexist")
DEFAULT_CONTEXT = 32768


@dataclass
class CheckOptions:
    model_config: str | None = None  # a preset name or a folder with config.json: the plan step needs one
    gpu: str | None = None  # None: the GPU of this machine, if it has one the plan knows; else no plan step
    context: str | None = None  # None: 32K, or the model's own maximum where that is shorter
    alongside: list[str] = field(default_factory=list)
    suite: str = "quick"  # quick | full
    skip: frozenset[str] = frozenset()
    bench_requests: int = 3  # per single-stream scenario; a concurrent one sends HOLD_WAVES per stream
    max_tokens: int = 64
    coexist_utterances: int = 5  # of 25 chunks, one round: 120 intervals per condition, enough for a p99
    engine_memory: tuple[int, int] | None = None  # the embedded engine's KV bytes and context: plan for those


@dataclass
class StepResult:
    step: str
    run_id: str | None = None
    skipped: str | None = None
    error: str | None = None
    verdicts: list[str] = field(default_factory=list)


@dataclass
class CheckOutcome:
    """The check's own run (its steps and their verdicts, stored as a ``check`` result) and each step's."""

    run_id: str
    steps: list[StepResult]

    def __iter__(self) -> Iterator[StepResult]:
        return iter(self.steps)


def validate(options: CheckOptions) -> None:
    """Every argument, before the first step runs (a typo in --gpu is said at once, not after the bench)."""
    from servelab.plan import gpu, parse_alongside, parse_tokens, resolve_model

    unknown = set(options.skip) - set(STEPS)
    if unknown:
        raise UsageError(f"--skip takes {', '.join(STEPS)}; got {', '.join(sorted(unknown))}")
    if options.suite not in ("quick", "full"):
        raise UsageError(f"--suite is quick or full, got {options.suite!r}")
    if options.gpu is not None:
        gpu(options.gpu)
    parse_alongside(options.alongside)
    if options.model_config and "plan" not in options.skip:
        plan_context(options, resolve_model(options.model_config).spec.max_position)
    elif options.context is not None:
        parse_tokens(options.context)


def plan_context(options: CheckOptions, model_max: int) -> int:
    """The plan step's context: the one asked for (refused beyond the model's maximum), else 32K or the model's
    maximum where that is shorter."""
    from servelab.plan import parse_tokens

    if options.context is None:
        return min(DEFAULT_CONTEXT, model_max) if model_max else DEFAULT_CONTEXT
    asked = parse_tokens(options.context)
    if model_max and asked > model_max:
        raise UsageError(
            f"--context {asked:,} is longer than the model supports ({model_max:,} tokens)",
            hint="give a shorter --context, or none for the model's own maximum",
        )
    return asked


def this_gpu() -> str | None:
    """The plan's name for this machine's first GPU (nvidia-smi), None without one or for one the plan lacks."""
    from servelab.plan import GPUS

    for info in gpu_info()[:1]:
        name = info.get("name", "").lower()
        for key in sorted(GPUS, key=len, reverse=True):
            if key.split("-")[0] in name.replace(" ", "-"):
                return key
    return None


def run_check(
    store: RunStore,
    targets: Sequence[Target],
    options: CheckOptions,
    progress: Callable[[str, str], None] = lambda step, what: None,
) -> CheckOutcome:
    validate(options)
    args = {"model_config": options.model_config, "gpu": options.gpu, "suite": options.suite,
            "skip": sorted(options.skip)}  # fmt: skip
    with recording(store, "check", build_manifest("check", args, {t.name: t.url for t in targets})) as run:
        steps = _steps(store, targets, options, progress, run)
    return CheckOutcome(run.run_id, steps)


def _steps(
    store: RunStore,
    targets: Sequence[Target],
    options: CheckOptions,
    progress: Callable[[str, str], None],
    run: RunRecorder,
) -> list[StepResult]:
    runners: dict[str, Callable[[], str]] = {
        "plan": lambda: _plan(store, options),
        "bench": lambda: _bench(store, targets, options),
        "eval": lambda: _eval(store, targets, options),
        "coexist": lambda: _coexist(store, targets, options),
    }
    results = []
    for step in STEPS:
        if step in options.skip:
            results.append(StepResult(step, skipped="--skip"))
            continue
        if step == "plan" and not options.model_config:
            results.append(StepResult(step, skipped="no model config (--model-config)"))
            continue
        if step == "plan" and options.gpu is None and options.engine_memory is None:
            options = replace(options, gpu=this_gpu())
            if options.gpu is None:
                results.append(StepResult(step, skipped="no GPU the plan knows on this machine: give --gpu NAME"))
                continue
        progress(step, "running")
        try:
            run_id = runners[step]()
            failed = _request_failures(store, run_id)
            results.append(StepResult(step, run_id=run_id, error="; ".join(failed) if failed else None))
        except Exception as exc:  # one failed step must not lose the others
            detail = str(exc) if isinstance(exc, ServelabError) else f"{type(exc).__name__}: {exc}"
            results.append(StepResult(step, error=detail, run_id=_latest_failed(store, step)))
        _part_of_check(store, results[-1].run_id, step, run.run_id)
        results[-1].verdicts = _verdicts(store, results[-1].run_id)
        run.result(_stored(results))
        progress(step, results[-1].error or results[-1].skipped or "done")
    return results


def _request_failures(store: RunStore, run_id: str) -> list[str]:
    result = load_result(store, store.get_run(run_id))
    return [f"requests failed: {line}" for line in result.request_failures()] if result else []


def _verdicts(store: RunStore, run_id: str | None) -> list[str]:
    """What the step's run answers, as its report section says it."""
    return section(store, store.get_run(run_id), with_plots=False).verdicts if run_id else []


def _stored(results: Sequence[StepResult]) -> CheckRun:
    steps = [CheckStep(step=r.step, run_id=r.run_id, skipped=r.skipped, error=r.error, verdicts=r.verdicts)
             for r in results]  # fmt: skip
    failed = [f"{r.step}: {r.error}" for r in results if r.error]
    return CheckRun(steps=steps, warnings=failed)


def _part_of_check(store: RunStore, run_id: str | None, step: str, check: str) -> None:
    """Mark a step's run as a part of the check (its manifest's ``check_step``): ``latest`` then names the check,
    whatever made the step's run."""
    if run_id is None:
        return
    manifest = dict(store.get_run(run_id).manifest)
    manifest["args"] = {**(manifest.get("args") or {}), "check_step": step, "check_run": check}
    store.set_manifest(run_id, manifest)


def _latest_failed(store: RunStore, step: str) -> str | None:
    """The run a failed step left behind (stored as failed, with what it measured), if it got that far; each
    step stores runs of its own name as their kind."""
    runs = [r for r in store.list_runs(limit=1) if r.kind == step and r.status != STATUS_COMPLETE]
    return runs[0].run_id if runs else None


def _plan(store: RunStore, options: CheckOptions) -> str:
    from servelab.plan import PlanRequest, gpu, make_plan, parse_alongside, resolve_model

    resolved = resolve_model(str(options.model_config))
    if options.gpu is None and options.engine_memory is not None:  # the embedded engine: its own memory
        kv_bytes, context = options.engine_memory
        request = PlanRequest(
            gpu_name="the embedded CPU engine", gpu_bytes=_host_memory(), bandwidth_gbs=None, context=context,
            concurrency=1, quant=None, kv_dtype="auto", engine="vllm-cpu", kv_pool_bytes=kv_bytes, block_size=128,
        )  # fmt: skip
    else:
        card = gpu(str(options.gpu))
        request = PlanRequest(
            gpu_name=card.key,
            gpu_bytes=card.memory_bytes,
            bandwidth_gbs=card.bandwidth_gbs,
            context=plan_context(options, resolved.spec.max_position),
            concurrency=1,
            quant=None,
            kv_dtype="auto",
            alongside=parse_alongside(options.alongside),
            cuda_total_bytes=card.cuda_total_bytes,
        )
    result = make_plan(resolved, request)
    args = {"model": options.model_config, "gpu": options.gpu, "context": request.context}
    with recording(store, "plan", build_manifest("plan", args, {})) as run:
        run.result(result.stored())
    return run.run_id


def _host_memory() -> int:
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _bench(store: RunStore, targets: Sequence[Target], options: CheckOptions) -> str:
    load = Load(requests=options.bench_requests, max_tokens=options.max_tokens, warmup=1, per_stream=HOLD_WAVES)
    return run_bench(store, targets, expand(["seed-000"]), load).run_id


def _eval(store: RunStore, targets: Sequence[Target], options: CheckOptions) -> str:
    from servelab.eval import EvalOptions, builtin_suites, load_items, run_eval

    suites = ["quick"] if options.suite == "quick" else [s for s in builtin_suites() if s != "code"]
    return run_eval(store, list(targets), load_items(suites), EvalOptions()).run_id


def _coexist(store: RunStore, targets: Sequence[Target], options: CheckOptions) -> str:
    from servelab.coexist import CoexistOptions, LlmLoad, WorkerProbe, run_coexist

    probe = WorkerProbe(_probe_spec())
    load = LlmLoad(decode_streams=2, decode_tokens=options.max_tokens, prefill_tokens=1500)
    opts = CoexistOptions(repeats=1, utterances=options.coexist_utterances, load=load, settle_s=2.0)
    result = run_coexist(store, probe, targets[0], opts)
    if result.failed:
        raise RuntimeError(result.failed)
    return result.run_id


def _probe_spec() -> Any:
    """The GPU probe where torch sees a GPU, else the CPU one."""
    from servelab.coexist import WorkerSpec

    try:
        import torch

        if torch.cuda.is_available():
            return WorkerSpec("cuda", "voice", 1024, 28, 3072, steps_per_chunk=8, period_ms=2000)
    except ImportError:
        pass
    return WorkerSpec("cpu", "voice", 256, 4, 768, chunks=25, period_ms=2000)


def failure_notes(outcome: CheckOutcome) -> list[str]:
    """What failed, a line a step, for the top of the report."""
    return [f"{r.step}: {r.error}" for r in outcome if r.error]


def report_runs(outcome: CheckOutcome) -> list[str]:
    """The check's own run first (its steps and verdicts), then each step's."""
    return [outcome.run_id, *(r.run_id for r in outcome if r.run_id)]


def default_report_path(store_path: Path) -> Path:
    return store_path.parent / "reports" / "check-report.html"
