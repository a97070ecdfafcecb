"""One session's history and what its next prompt is.

The rule it keeps: each turn's prompt is the previous turn's prompt, then the reply the model actually streamed
(as the assistant message; a tool turn adds a tool call to it, in the OpenAI shape, unless the model streamed its
own), then the turn's new content; except where that prompt would pass the limit, when the history is compacted:
the head, then a summary of set size with the new content. The limit is never passed: the history's size is the
server's own count of the last prompt and reply (``usage``) plus what was added since, estimated with slack."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MESSAGE_MARGIN = 16  # tokens a chat template may add around one message (role markers, separators)
ESTIMATE_SLACK = 1.05  # new content is counted from a measured tokens-per-line: kept this far above it
TOOL_CALL_MARGIN = 64  # tokens a tool call added to a reply may render to (name, id, arguments, markers)

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Prompt:
    messages: list[Message]
    compacted: bool  # the history was replaced by the head and a summary before this turn
    estimated_tokens: int  # a bound on what the server will count
    limit: int | None  # the most prompt tokens this turn may send

    @property
    def fits(self) -> bool:
        return self.limit is None or self.estimated_tokens <= self.limit


@dataclass
class Conversation:
    """A session's messages, and a bound on their tokens. ``limit(output_tokens)`` is the most prompt tokens a turn
    asking for that reply may send (None: no limit); ``summary(n, tokens)`` the text of the n-th summary."""

    head: list[Message]
    head_tokens: int  # estimated, without template margins
    limit: Callable[[int], int | None]
    summary: Callable[[int, int], str]
    summary_tokens: int
    session: int = 0
    messages: list[Message] = field(default_factory=list)
    tokens: int = 0  # a bound on the history's prompt tokens as the server counts them
    compactions: int = 0

    def __post_init__(self) -> None:
        self._restart()

    def _restart(self) -> None:
        self.messages = [dict(m) for m in self.head]
        self.tokens = self._estimate(self.head_tokens, len(self.head))

    @staticmethod
    def _estimate(tokens: int, messages: int) -> int:
        return int(tokens * ESTIMATE_SLACK) + MESSAGE_MARGIN * messages

    def next_prompt(self, turn: int, text: str, tokens: int, output_tokens: int, *, tool: bool) -> Prompt:
        """The prompt of turn ``turn``: the history and ``text`` (``tokens`` of it, estimated), compacted first where
        the whole would pass the limit."""
        limit = self.limit(output_tokens)
        tool = tool and self.messages[-1].get("role") == "assistant"  # a tool answers the call a reply made
        compacted = False
        if (
            limit is not None
            and self.tokens + self._added(tokens, tool) > limit
            and len(self.messages) > len(self.head)
        ):
            self.compactions += 1
            self._restart()
            text = self.summary(self.compactions, self.summary_tokens) + "\n\n" + text
            tokens += self.summary_tokens
            compacted, tool = True, False
        self.tokens += self._added(tokens, tool)
        if tool:
            self.messages.append({"role": "tool", "tool_call_id": self._called(turn), "content": text})
        else:
            self.messages.append({"role": "user", "content": text})
        return Prompt([dict(m) for m in self.messages], compacted, self.tokens, limit)

    def _added(self, tokens: int, tool: bool) -> int:
        """A bound on what a new message of ``tokens`` adds (a tool call added to the last reply too)."""
        calls = tool and not self.messages[-1].get("tool_calls")
        return self._estimate(tokens, 1) + (TOOL_CALL_MARGIN if calls else 0)

    def _called(self, turn: int) -> str:
        """The id of the tool call the last reply made: the model's own, or one added in the OpenAI shape."""
        last = self.messages[-1]
        calls = last.get("tool_calls") or []
        if calls and isinstance(calls[0], dict) and calls[0].get("id"):
            return str(calls[0]["id"])
        call_id = f"call_{self.session}_{turn}"
        arguments = json.dumps({"path": f"src/module_{turn}.py"})
        last["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": arguments}}
        ]
        return call_id

    def answered(
        self, text: str, tool_calls: list[dict[str, Any]], prompt_tokens: int | None, reply_tokens: int
    ) -> None:
        """The reply the model streamed joins the history; the server's count of the prompt (``usage``) replaces the
        estimate where it gave one."""
        message: Message = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = [dict(c) for c in tool_calls]
        self.messages.append(message)
        if prompt_tokens is not None:
            self.tokens = prompt_tokens
        self.tokens += self._estimate(reply_tokens, 1) + (TOOL_CALL_MARGIN if tool_calls else 0)
