"""Ask every target every item (``repeats`` times), store the raw replies as they finish, then grade."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.core.records import Labels, RequestRecord
from servelab.core.results import Reply
from servelab.engines.client import ClientOptions, StreamClient
from servelab.eval import backends
from servelab.eval.grade import Grade, failed, from_channels, grade_exact, grade_text, grade_tool
from servelab.eval.items import Item
from servelab.eval.needle import fit_needle
from servelab.eval.replay import agreement
from servelab.eval.sandbox import Limits
from servelab.eval.stats import Graded
from servelab.load.runner import Target, room, token_counter


@dataclass(frozen=True)
class EvalOptions:
    repeats: int = 1
    concurrency: int = 4
    temperature: float = 0.0
    read_timeout: float = 120.0
    tool_choice: str = "auto"  # "required" forces a call (vLLM then constrains the output to one)
    sandbox: str | None = None  # "bwrap" or "none" when code items are in the run
    limits: Limits = field(default_factory=Limits)


def label(item: Item, repeat: int) -> str:
    return f"{item.suite}/{item.id}#{repeat}"


def labels(item: Item, repeat: int, turn: int) -> Labels:
    return Labels(step=label(item, repeat), suite=item.suite, item=item.id, repeat=repeat, turn=turn)


def parse_labels(record: RequestRecord) -> tuple[str, str, int, int] | None:
    """(suite, item, repeat, turn) of an eval reply; None for a record that is not one."""
    got = record.labels
    if got.suite is None or got.item is None or got.repeat is None:
        return None
    return got.suite, got.item, got.repeat, got.turn or 1


def payload(target: Target, item: Item, options: EvalOptions) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": target.model,
        "messages": item.messages(),
        "max_tokens": item.max_tokens,
        "temperature": options.temperature,
    }
    if item.tools:
        body["tools"] = item.tools
        body["tool_choice"] = options.tool_choice
    return body


async def ask_all(
    target: Target,
    items: Sequence[Item],
    options: EvalOptions,
    sink: Callable[[RequestRecord], None],
) -> tuple[list[Item], list[RequestRecord]]:
    """Every item ``options.repeats`` times, ``options.concurrency`` at once; records as they finish. Needle
    items are first fitted to the target's tokenizer, so the items asked are returned with the records."""
    client = StreamClient(
        target.url, target=target.name, options=ClientOptions(api_key=target.api_key, read_timeout=options.read_timeout)
    )
    gate = asyncio.Semaphore(options.concurrency)
    count = token_counter(client.base, target.model, target.api_key)
    items = [await fit_needle(i, count) if i.kind == "needle" else i for i in fitting(target, items)[0]]

    async def one(item: Item, repeat: int) -> list[RequestRecord]:
        async with gate:
            return await _conversation(client, target, item, repeat, options, sink)

    records = await asyncio.gather(*(one(i, r) for r in range(options.repeats) for i in items))
    return items, [r for turns in records for r in turns]


def fitting(target: Target, items: Sequence[Item]) -> tuple[list[Item], list[str]]:
    """The items whose prompt has room in the target's context, and why each other one is not asked (a prompt the
    server refuses says nothing of the model)."""
    keep, skipped = [], []
    for item in items:
        want, limit = int(item.meta.get("target_tokens") or 0), room(target, item.max_tokens)
        if limit is not None and want > limit:
            skipped.append(
                f"{target.name}/{item.suite}/{item.id}: not asked, its {want:,}-token prompt is longer than "
                f"{target.name}'s context has room for ({target.max_model_len:,} tokens)"
            )
        else:
            keep.append(item)
    return keep, skipped


async def _conversation(
    client: StreamClient,
    target: Target,
    item: Item,
    repeat: int,
    options: EvalOptions,
    sink: Callable[[RequestRecord], None],
) -> list[RequestRecord]:
    """One request; for an item with a backend, its tool calls are run there and the results sent back until
    the model answers in text (or ``max_turns``)."""
    body = payload(target, item, options)
    backend, turns = item.meta.get("backend"), int(item.meta.get("max_turns", 1))
    records: list[RequestRecord] = []
    for turn in range(1, turns + 1):
        name = label(item, repeat) + (f"+{turn}" if turn > 1 else "")
        record = client.new_record("chat", scenario=name, labels=labels(item, repeat, turn))
        await client.send("chat", body, record=record)
        sink(record)
        records.append(record)
        if not backend or not record.ok or not record.tool_calls:
            break
        calls = [{**c, "id": c.get("id") or f"call_{turn}_{i}"} for i, c in enumerate(record.tool_calls)]
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": record.output_text or None, "tool_calls": calls},
            *(
                {"role": "tool", "tool_call_id": c["id"], "content": backends.call(
                    backend, c["function"]["name"], c["function"].get("arguments", "{}"))}
                for c in calls
            ),
        ]  # fmt: skip
    return records


def grade_record(item: Item, record: RequestRecord, options: EvalOptions, final: RequestRecord | None = None) -> Grade:
    """One reply's grade; code items run their tests in the sandbox; a multi-turn item is right when both its
    first call and its ``final`` answer are."""
    if final is not None and item.meta.get("final"):
        return _multi_turn(item, record, final)
    if (early := failed(record)) is not None:
        return early
    if item.kind in ("tool", "replay"):
        return grade_tool(record.tool_calls, record.output_text, item.answer)
    if item.kind == "needle":
        return grade_exact(record.output_text, str(item.answer))
    if item.kind == "code":
        from servelab.eval.code import grade_code  # the sandbox only when code is graded

        return grade_code(item, record.output_text, options.sandbox or "bwrap", options.limits)
    return grade_text(item.kind, record.output_text, item.answer)


def _multi_turn(item: Item, first: RequestRecord, final: RequestRecord) -> Grade:
    if (early := failed(first) or failed(final)) is not None:
        return early
    call = grade_tool(first.tool_calls, first.output_text, item.answer)
    spec = item.meta["final"]
    answer = grade_text(spec["kind"], final.output_text, spec["answer"]) if final is not first else None
    if answer is None:
        return from_channels(False, False, f"{call.detail}; no answer after the tool result")
    detail = f"{call.detail}; final: {answer.outcome.value}"
    return from_channels(call.strict and answer.strict, call.semantic and answer.semantic, detail)


@dataclass
class GradedReply:
    item: Item
    repeat: int
    record: RequestRecord
    grade: Grade

    def graded(self) -> Graded:
        return Graded(self.record.target, self.item.id, self.repeat, self.grade.outcome, self.item.category)

    def to_dict(self) -> dict[str, Any]:
        return {
            "item": self.item.id,
            "suite": self.item.suite,
            "category": self.item.category,
            "repeat": self.repeat,
            "request_id": self.record.request_id,
            "prompt_tokens": self.record.prompt_tokens,
            **self.grade.to_dict(),
            **(
                {"agreement": agreement(self.record.tool_calls, self.item.answer)} if self.item.kind == "replay" else {}
            ),
        }


REPLY_CHARS = 400  # of the model's text kept in the result for a person (the record keeps it whole)


def reply_result(g: GradedReply) -> Reply:
    record = g.record
    error = f"{record.error.value}: {record.error_detail}" if record.error else None
    return Reply(
        target=record.target, suite=g.item.suite, item=g.item.id, category=g.item.category, repeat=g.repeat,
        outcome=g.grade.outcome.value, strict=g.grade.strict, semantic=g.grade.semantic, detail=g.grade.detail,
        request_id=record.request_id, prompt_tokens=record.prompt_tokens,
        reply=(record.output_text or _calls_text(record))[:REPLY_CHARS], error=error,
    )  # fmt: skip


def _calls_text(record: RequestRecord) -> str:
    calls = [c.get("function", {}) for c in record.tool_calls]
    return "; ".join(f"{c.get('name')}({c.get('arguments', '')})" for c in calls)


def grade_all(items: Sequence[Item], records: Sequence[RequestRecord], options: EvalOptions) -> list[GradedReply]:
    """One graded reply per item and repeat (a multi-turn item's later turns feed its grade)."""
    by_id = {(i.suite, i.id): i for i in items}
    turns: dict[tuple[str, str, int], dict[int, RequestRecord]] = {}
    for record in records:
        if (where := parse_labels(record)) is None:
            continue
        suite, item_id, repeat, turn = where
        turns.setdefault((suite, item_id, repeat), {})[turn] = record
    out = []
    for (suite, item_id, repeat), got in turns.items():
        item = by_id.get((suite, item_id))
        if item is None or 1 not in got:
            continue
        final = got[max(got)] if item.meta.get("final") else None
        out.append(GradedReply(item, repeat, got[1], grade_record(item, got[1], options, final)))
    return out


def item_to_dict(item: Item) -> dict[str, Any]:
    return asdict(item)


def item_from_dict(data: dict[str, Any]) -> Item:
    return Item(**data)
