"""Replay recorded agent traces: every recorded assistant turn becomes an item whose prompt is the conversation
before it; the target's next turn is compared with the recorded one (tool choice, arguments, strict and
semantic grades)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.core.errors import UsageError
from servelab.core.known_keys import refuse_near_misses
from servelab.eval.items import Item

TRACE_KEYS = ("messages", "tools")  # a trace's other keys (model, id) are its own; a misspelling of these is refused


def load_traces(path: Path) -> list[Item]:
    """JSONL (one trace per line) or a JSON list; a trace is a message list or {"messages": [...], "tools": [...]}."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read traces {path}: {exc.strerror or exc}") from None
    traces = _parse(text, path)
    items: list[Item] = []
    for n, trace in enumerate(traces, start=1):
        messages, tools = _trace(trace, path, n)
        items += _turns(messages, tools, n)
    if not items:
        raise UsageError(f"no assistant turns to replay in {path}", hint="each trace needs an assistant message")
    return items


def _parse(text: str, path: Path) -> list[Any]:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
        if data and all(isinstance(m, dict) and "role" in m for m in data):
            return [data]  # one trace, a bare message list
        return list(data)
    out = []
    for number, line in enumerate(stripped.splitlines(), start=1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{number}: not JSON ({exc.msg})") from None
    return out


def _trace(trace: Any, path: Path, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if isinstance(trace, dict):
        refuse_near_misses(trace, TRACE_KEYS, f"{path}: trace {n}")
    messages, tools = (trace.get("messages"), trace.get("tools", [])) if isinstance(trace, dict) else (trace, [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise UsageError(f"{path}: trace {n} is not a list of messages with roles")
    return messages, list(tools or [])


def _turns(messages: list[dict[str, Any]], tools: list[dict[str, Any]], n: int) -> list[Item]:
    items = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or i == 0:
            continue
        calls = message.get("tool_calls") or []
        expected = None
        if calls:
            function = calls[0].get("function", {})
            arguments = function.get("arguments", "{}")
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            except json.JSONDecodeError:
                parsed = arguments
            expected = {"name": function.get("name", ""), "arguments": parsed}
        items.append(
            Item(
                id=f"trace{n}-turn{i}",
                suite="replay",
                kind="replay",
                prompt="",
                answer=expected,
                category="tool call" if calls else "text reply",
                max_tokens=1024,
                tools=tools,
                history=messages[:i],
                meta={"recorded_text": message.get("content") or ""},
            )
        )
    return items


def agreement(tool_calls: list[dict[str, Any]], expected: dict[str, Any] | None) -> dict[str, bool]:
    """Tool choice agreement (the same tool, or no tool on both sides) and argument match (typed)."""
    from servelab.eval.grade import grade_tool

    name = tool_calls[0].get("function", {}).get("name") if tool_calls else None
    same_choice = (name is None and expected is None) or (expected is not None and name == expected["name"])
    return {"tool_choice": same_choice, "arguments": same_choice and grade_tool(tool_calls, "", expected).strict}
