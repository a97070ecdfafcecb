"""Running an eval: items asked of every target, graded, stored raw so they can be re-graded offline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servelab.core.errors import UsageError
from servelab.core.recorder import recording
from servelab.core.records import RequestRecord
from servelab.core.results import EvalRun, save_result
from servelab.core.store import RunStore
from servelab.engines.manifest import build_manifest
from servelab.eval.items import Item, load_suite
from servelab.eval.needle import needle_grid
from servelab.eval.replay import agreement, load_traces
from servelab.eval.runner import (
    EvalOptions,
    GradedReply,
    ask_all,
    fitting,
    grade_all,
    item_from_dict,
    item_to_dict,
    reply_result,
)
from servelab.eval.stats import accuracy, paired, repeats
from servelab.load.runner import Target

NEEDLE_LENGTHS = (2000, 8000, 36000)
NEEDLE_DEPTHS = (0.0, 0.5, 1.0)


def load_items(
    suites: Sequence[str], needle_lengths: Sequence[int] = NEEDLE_LENGTHS, traces: Path | None = None
) -> list[Item]:
    items: list[Item] = []
    for name in suites:
        if name == "needle":
            items += needle_grid(list(needle_lengths), list(NEEDLE_DEPTHS))
        elif name == "replay":
            if traces is None:
                raise UsageError("--suite replay needs --traces FILE (agent traces as OpenAI message lists)")
            items += load_traces(traces)
        else:
            items += load_suite(name)
    return items


@dataclass
class EvalResult:
    run_id: str
    replies: dict[str, list[GradedReply]] = field(default_factory=dict)  # target -> graded replies
    stored: EvalRun = field(default_factory=EvalRun)  # what every output renders
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # items not asked (longer than the target's context)


def summarize(replies: dict[str, list[GradedReply]], k: int) -> dict[str, Any]:
    """Per target: accuracy overall and per suite and category, repeats; the first two targets paired."""
    out: dict[str, Any] = {"targets": {}}
    for target, got in replies.items():
        graded = [g.graded() for g in got]
        suites = sorted({g.item.suite for g in got})
        categories = sorted({f"{g.item.suite}/{g.item.category}" for g in got})
        out["targets"][target] = {
            "all": accuracy(graded),
            "suites": {s: accuracy([g.graded() for g in got if g.item.suite == s]) for s in suites},
            "categories": {
                c: accuracy([g.graded() for g in got if f"{g.item.suite}/{g.item.category}" == c]) for c in categories
            },
            "repeats": repeats(graded, k) if k > 1 else None,
            "replay": _replay(got),
        }
    names = list(replies)
    if len(names) >= 2:
        a, b = ([g.graded() for g in replies[n]] for n in names[:2])
        out["paired"] = {
            "first": names[0],
            "second": names[1],
            "strict": paired(a, b),
            "semantic": paired(a, b, "semantic"),
        }
    return out


def _replay(got: Sequence[GradedReply]) -> dict[str, Any] | None:
    turns = [agreement(g.record.tool_calls, g.item.answer) for g in got if g.item.kind == "replay" and g.record.ok]
    if not turns:
        return None
    return {
        "turns": len(turns),
        "tool_choice_agreement": sum(t["tool_choice"] for t in turns) / len(turns),
        "argument_match": sum(t["arguments"] for t in turns) / len(turns),
    }


def _warnings(target: str, replies: Sequence[GradedReply]) -> list[str]:
    out = []
    for g in replies:
        want = g.item.meta.get("target_tokens")
        got = g.record.prompt_tokens
        if want and got and abs(got - want) > 0.15 * want:
            out.append(f"{target}/{g.item.id}: the prompt was {got} tokens by the server's count, {want} intended")
    return out


def run_eval(
    store: RunStore,
    targets: Sequence[Target],
    items: Sequence[Item],
    options: EvalOptions,
    *,
    on_record: Callable[[RequestRecord], None] | None = None,
    args: dict[str, Any] | None = None,
) -> EvalResult:
    """Ask, store every reply as it finishes, grade, store grades and a summary. A failure midway keeps
    what was measured: the records are in the store and the run is marked failed."""
    extra = {"suites": sorted({i.suite for i in items}), "options": asdict(options), "items": len(items)}
    manifest = build_manifest("eval", args or {}, {t.name: t.url for t in targets}, extra)
    with recording(store, "eval", manifest, on_record) as run:
        run.summary("eval/items", {"items": [item_to_dict(i) for i in items]})
        result = EvalResult(run.run_id)
        for target in targets:
            asked, records = asyncio.run(ask_all(target, items, options, run.sink))
            run.summary(f"eval/items/{target.name}", {"items": [item_to_dict(i) for i in asked]})
            result.replies[target.name] = grade_all(asked, records, options)
            result.warnings += _warnings(target.name, result.replies[target.name])
            result.skipped += fitting(target, items)[1]
            run.result(_graded(result, options))
    return result


def _graded(result: EvalResult, options: EvalOptions) -> EvalRun:
    """The typed result of what is graded so far: accuracies, the pairing, every reply."""
    summary = summarize(result.replies, options.repeats)
    replies = [reply_result(g) for got in result.replies.values() for g in got]
    result.stored = EvalRun.model_validate(
        {
            **summary,
            "replies": replies,
            "warnings": result.warnings,
            "sandbox": options.sandbox,
            "skipped": result.skipped,
        }
    )
    return result.stored


def regrade(store: RunStore, run_id: str, options: EvalOptions) -> EvalResult:
    """Grade a stored run again from its raw replies (no target needed); stores the new grades."""
    info = store.get_run(run_id, kinds=("eval",))
    stored = store.summaries(info.run_id).get("eval/items")
    if stored is None:
        raise UsageError(f"run {info.run_id} is not an eval run (no stored items)")
    summaries = store.summaries(info.run_id)
    records = store.records(info.run_id)
    result = EvalResult(info.run_id)
    for target in dict.fromkeys(r.target for r in records):
        asked = summaries.get(f"eval/items/{target}", stored)
        items = [item_from_dict(d) for d in asked["items"]]
        result.replies[target] = grade_all(items, [r for r in records if r.target == target], options)
    graded = _graded(result, options)
    save_result(store, info.run_id, graded.model_copy(update={"status": info.status, "error": info.error}))
    return result
