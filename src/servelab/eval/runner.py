"""Ask every target every item (``repeats`` times), store the raw replies as they finish, then grade."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.bench.runner import Target, token_counter
from servelab.core.records import RequestRecord
from servelab.engines.client import ClientOptions, StreamClient
from servelab.eval.grade import Grade, failed, grade_exact, grade_text, grade_tool
from servelab.eval.items import Item
from servelab.eval.needle import fit_needle
from servelab.eval.replay import agreement
from servelab.eval.sandbox import Limits
from servelab.eval.stats import Graded


@dataclass(frozen=True)
class EvalOptions:
    repeats: int = 1
    concurrency: int = 4
    temperature: float = 0.0
    read_timeout: float = 120.0
    sandbox: str | None = None  # "bwrap" or "none" when code items are in the run
    limits: Limits = field(default_factory=Limits)


def label(item: Item, repeat: int) -> str:
    return f"{item.suite}/{item.id}#{repeat}"


def parse_label(text: str) -> tuple[str, str, int]:
    """``suite/item#repeat`` → (suite, item, repeat)."""
    head, _, repeat = text.rpartition("#")
    suite, _, item = head.partition("/")
    return suite, item, int(repeat)


def payload(target: Target, item: Item, options: EvalOptions) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": target.model,
        "messages": item.messages(),
        "max_tokens": item.max_tokens,
        "temperature": options.temperature,
    }
    if item.tools:
        body["tools"] = item.tools
        body["tool_choice"] = "auto"
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
    count = token_counter(client.base, target.model)
    items = [await fit_needle(i, count) if i.kind == "needle" else i for i in items]

    async def one(item: Item, repeat: int) -> RequestRecord:
        async with gate:
            record = client.new_record("chat", scenario=label(item, repeat))
            await client.send("chat", payload(target, item, options), record=record)
            sink(record)
            return record

    records = await asyncio.gather(*(one(i, r) for r in range(options.repeats) for i in items))
    return items, list(records)


def grade_record(item: Item, record: RequestRecord, options: EvalOptions) -> Grade:
    """One reply's grade; code items run their tests in the sandbox."""
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


def grade_all(items: Sequence[Item], records: Sequence[RequestRecord], options: EvalOptions) -> list[GradedReply]:
    by_id = {(i.suite, i.id): i for i in items}
    out = []
    for record in records:
        suite, item_id, repeat = parse_label(record.scenario)
        item = by_id.get((suite, item_id))
        if item is not None:
            out.append(GradedReply(item, repeat, record, grade_record(item, record, options)))
    return out


def item_to_dict(item: Item) -> dict[str, Any]:
    return asdict(item)


def item_from_dict(data: dict[str, Any]) -> Item:
    return Item(**data)
