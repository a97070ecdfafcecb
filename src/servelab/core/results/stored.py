"""Results in the run store: saved whole (replaced as a run grows), read back by kind and version, and built from
the named summaries of a run stored before results were typed (schema 1 of the store)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from servelab.core.errors import StoreError
from servelab.core.records import Labels
from servelab.core.results.base import RunResult, Status
from servelab.core.results.bench import BenchRun
from servelab.core.results.check import CheckRun
from servelab.core.results.coexist import CoexistRun
from servelab.core.results.eval import EvalRun, RepoRun
from servelab.core.results.plan import PlanRun
from servelab.core.results.sweep import SweepRun
from servelab.core.store import RunInfo, RunStore

AnyResult = Annotated[
    BenchRun | EvalRun | RepoRun | CoexistRun | PlanRun | CheckRun | SweepRun, Field(discriminator="kind")
]
_ADAPTER: TypeAdapter[AnyResult] = TypeAdapter(AnyResult)
VERSIONS: dict[str, int] = {
    "bench": 3,
    "bench-slo": 3,
    "eval": 1,
    "repo": 1,
    "coexist": 4,
    "plan": 1,
    "check": 1,
    "sweep": 1,
}


def save_result(store: RunStore, run_id: str, result: RunResult) -> None:
    store.put_result(run_id, result.kind, result.version, result.model_dump_json())


def load_result(store: RunStore, info: RunInfo) -> RunResult | None:
    """The run's result: as stored, else built from the summaries of an older run; None when it has neither
    (a run killed before its first figure, or a kind that never had one)."""
    stored = store.result(info.run_id)
    if stored is not None:
        kind, version, text = stored
        if version > VERSIONS.get(kind, 0):
            raise StoreError(
                f"run {info.run_id} holds a {kind} result of version {version}, newer than this servelab knows",
                hint="upgrade servelab",
            )
        try:
            result: RunResult = _ADAPTER.validate_json(text)
        except ValidationError as exc:
            raise StoreError(f"run {info.run_id}: its stored result does not read: {exc.errors()[0]['msg']}") from exc
        return _with_status(result, info)
    legacy = _from_summaries(info, store.summaries(info.run_id))
    return _with_status(legacy, info) if legacy is not None else None


def _with_status(result: RunResult, info: RunInfo) -> RunResult:
    """The run row says how it ended (a process killed mid-run never updated its result)."""
    status: Status = info.status if info.status in ("running", "complete", "failed", "interrupted") else "failed"  # type: ignore[assignment]
    return result.model_copy(update={"status": status, "error": info.error or result.error})


# ---- runs stored before results were typed ---------------------------------------------------------------------
def _from_summaries(info: RunInfo, summaries: dict[str, dict[str, Any]]) -> RunResult | None:
    builder = _LEGACY.get(info.kind)
    if builder is None:
        return None
    try:
        return builder(summaries)
    except (KeyError, TypeError, ValueError, ValidationError):
        return None  # a summary shape this code never wrote: the run still lists and exports


def _legacy_bench(summaries: dict[str, dict[str, Any]]) -> RunResult | None:
    compare = summaries.get("compare")
    if compare is None and not any(n.startswith("slo/") for n in summaries):
        return None
    steps = []
    for name, data in summaries.items():
        target, sep, label = name.partition("/")
        if sep and target not in ("metrics", "slo", "compare") and "ttft_ms" in data:
            steps.append({"target": target, "scenario": label, "labels": Labels.from_scenario(label), "summary": data})
    rows = [
        {"scenario": r["scenario"], "differs": r.get("differs", {}), "cells": r["targets"]}
        for r in (compare or {}).get("rows", [])
    ]
    metrics = {n.removeprefix("metrics/"): s for n, s in summaries.items() if n.startswith("metrics/")}
    slo = {
        n.removeprefix("slo/"): {
            "over": s.get("over", "concurrency"),
            "best": s.get("best"),
            "tried": s["tried"],
            "slo": s.get("slo", {}),
        }
        for n, s in summaries.items()
        if n.startswith("slo/")
    }
    kind = "bench-slo" if slo else "bench"
    return BenchRun.model_validate(
        {
            "kind": kind,
            "steps": steps,
            "rows": rows,
            "metrics": metrics,
            "slo": slo,
            "warnings": (compare or {}).get("warnings", []),
        }
    )


def _legacy_eval(summaries: dict[str, dict[str, Any]]) -> RunResult | None:
    if "repo/summary" in summaries:
        repo = summaries["repo/summary"]
        return RepoRun.model_validate({"task": repo.get("task", ""), "targets": repo.get("targets", {})})
    summary = summaries.get("eval/summary")
    if summary is None:
        return None
    replies = [
        {"target": name.removeprefix("eval/"), **{k: v for k, v in reply.items() if k != "agreement"}}
        for name, data in summaries.items()
        if name.startswith("eval/") and isinstance(data.get("replies"), list)
        for reply in data["replies"]
    ]
    sandbox = next((d.get("sandbox") for n, d in summaries.items() if "replies" in d), None)
    return EvalRun.model_validate(
        {
            "targets": summary.get("targets", {}),
            "paired": summary.get("paired"),
            "replies": replies,
            "warnings": summary.get("warnings", []),
            "sandbox": sandbox,
        }
    )


def _legacy_coexist(summaries: dict[str, dict[str, Any]]) -> RunResult | None:
    head = summaries.get("coexist")
    if head is None:
        return None
    conditions = [{**c, "llm": c.get("llm") or None} for c in head.get("conditions", [])]
    return CoexistRun.model_validate(
        {
            "probe": head.get("probe", {}),
            "sharing": head.get("sharing", {}),
            "conditions": conditions,
            "warnings": head.get("warnings", []),
            "error": head.get("failed"),
        }
    )


def _legacy_plan(summaries: dict[str, dict[str, Any]]) -> RunResult | None:
    plan = summaries.get("plan")
    return PlanRun.model_validate({"plan": plan}) if plan is not None else None


_LEGACY: dict[str, Callable[[dict[str, dict[str, Any]]], RunResult | None]] = {
    "bench": _legacy_bench,
    "bench-slo": _legacy_bench,
    "eval": _legacy_eval,
    "coexist": _legacy_coexist,
    "plan": _legacy_plan,
}
