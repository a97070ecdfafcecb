"""An agent loop over the OpenAI tool-calling API: shell and file tools inside the sandbox, step and time
limits, every turn kept as the trajectory."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from servelab.core.records import Labels, RequestRecord
from servelab.engines.client import ClientOptions, StreamClient
from servelab.eval.repair.workspace import Workspace
from servelab.eval.sandbox import Limits
from servelab.load.runner import Target


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(params)},
        },
    }


TOOLS = [
    _tool("shell", "Run a bash command in the repository folder (no network). Returns exit code and output.",
          command="the command line"),
    _tool("read_file", "Read a file of the repository.", path="path relative to the repository root"),
    _tool("write_file", "Replace a file's whole content (creates it if missing).",
          path="path relative to the repository root", content="the complete new content"),
    _tool("finish", "Say that the work is done.", summary="what was changed"),
]  # fmt: skip


@dataclass(frozen=True)
class AgentLimits:
    max_steps: int = 30
    timeout_s: float = 600.0
    shell: Limits = field(default_factory=lambda: Limits(timeout_s=60))


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]
    steps: int = 0
    stopped: str = ""  # finish, no_tool_call, max_steps, timeout, error
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "stopped": self.stopped, "error": self.error, "seconds": round(self.seconds, 3),
                "messages": self.messages}  # fmt: skip


Policy = Callable[[list[dict[str, Any]]], Awaitable[RequestRecord]]


def chat_policy(target: Target, sink: Callable[[RequestRecord], None], labels: Labels, read_timeout: float) -> Policy:
    """The model behind ``target``: one streamed chat completion per step, stored through ``sink``."""
    client = StreamClient(
        target.url, target=target.name, options=ClientOptions(api_key=target.api_key, read_timeout=read_timeout)
    )

    async def policy(messages: list[dict[str, Any]]) -> RequestRecord:
        record = client.new_record("chat", scenario=labels.step, labels=labels)
        body = {"model": target.model, "messages": messages, "tools": TOOLS, "tool_choice": "auto",
                "temperature": 0.0, "max_tokens": 2048}  # fmt: skip
        await client.send("chat", body, record=record)
        sink(record)
        return record

    return policy


async def run_agent(policy: Policy, instructions: str, workspace: Workspace, limits: AgentLimits) -> Trajectory:
    listing = "\n".join(sorted(str(p.relative_to(workspace.root)) for p in workspace.root.rglob("*") if p.is_file()))
    trajectory = Trajectory(
        [
            {"role": "system", "content": "You are a careful software engineer. Use the tools to work."},
            {"role": "user", "content": f"{instructions}\n\nFiles:\n{listing}"},
        ]
    )
    start = time.monotonic()
    try:
        await asyncio.wait_for(_loop(policy, workspace, limits, trajectory), timeout=limits.timeout_s)
    except TimeoutError:
        trajectory.stopped = "timeout"
    trajectory.seconds = time.monotonic() - start
    return trajectory


async def _loop(policy: Policy, workspace: Workspace, limits: AgentLimits, trajectory: Trajectory) -> None:
    messages = trajectory.messages
    while trajectory.steps < limits.max_steps:
        trajectory.steps += 1
        record = await policy(messages)
        if record.error is not None:
            trajectory.stopped, trajectory.error = "error", f"{record.error.value}: {record.error_detail}"
            return
        calls = [{**c, "id": c.get("id") or f"call_{trajectory.steps}_{i}"} for i, c in enumerate(record.tool_calls)]
        messages.append(
            {"role": "assistant", "content": record.output_text or None, **({"tool_calls": calls} if calls else {})}
        )
        if not calls:
            trajectory.stopped = "no_tool_call"
            return
        for call in calls:
            name = call.get("function", {}).get("name", "")
            if name == "finish":
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "done"})
                trajectory.stopped = "finish"
                return
            output = await asyncio.to_thread(workspace.call, name, call.get("function", {}).get("arguments", "{}"))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    trajectory.stopped = "max_steps"
