"""Turn OpenAI-style streaming events into fields of a :class:`RequestRecord`.

Understands chat deltas (content, ``reasoning_content`` / ``reasoning``, ``tool_calls``),
completions ``text``, usage-only chunks, in-band errors and llama.cpp's ``timings``.
"""

from __future__ import annotations

from typing import Any

import orjson

from servelab.core.records import ErrorClass, RequestRecord
from servelab.engines.sse import SSEEvent

DONE = "[DONE]"


class StreamInterpreter:
    """Applies one stream's events to its record, in order."""

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.done = False
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._tools: dict[int, dict[str, Any]] = {}

    def apply(self, event: SSEEvent) -> None:
        if self.done or self.record.error is not None:
            return
        data = event.data
        if data[:1] != "{" and data.strip() == DONE:
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            self._fail(ErrorClass.MALFORMED, f"not JSON: {data[:120]!r} ({exc.msg})")
            return
        if not isinstance(chunk, dict):
            self._fail(ErrorClass.MALFORMED, f"event is not a JSON object: {event.data[:120]!r}")
            return
        content = _plain_content(chunk) if event.event == "message" and self.record.model else None
        if content is not None:  # the common chunk, one token of content and nothing else to note
            if content:
                self._content.append(content)
            self._token(event.arrived_ns, content=True)
            return
        if event.event == "error" or "error" in chunk:
            self._fail(ErrorClass.STREAM_ERROR, _error_text(chunk))
            return
        self._chunk(chunk, event.arrived_ns)

    def finish(self) -> None:
        """Write the accumulated text and tool calls into the record."""
        self.record.output_text = "".join(self._content)
        self.record.reasoning_text = "".join(self._reasoning)
        self.record.tool_calls = [self._tools[i] for i in sorted(self._tools)]

    def _fail(self, kind: ErrorClass, detail: str) -> None:
        self.record.error = kind
        self.record.error_detail = detail

    def _chunk(self, chunk: dict[str, Any], arrived_ns: int) -> None:
        if not self.record.model and isinstance(chunk.get("model"), str):
            self.record.model = chunk["model"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            _apply_usage(self.record, usage)
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self.record.server_timings = timings
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict):
                self._choice(choice, arrived_ns)

    def _choice(self, choice: dict[str, Any], arrived_ns: int) -> None:
        reason = choice.get("finish_reason")
        if reason:
            self.record.finish_reason = str(reason)
        delta = choice.get("delta")
        got_content = got_other = False
        if isinstance(delta, dict):
            got_content = self._text(delta.get("content"), self._content) or _empty_token(delta, reason)
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            got_other = self._text(reasoning, self._reasoning)
            got_other = self._tool_deltas(delta.get("tool_calls")) or got_other
        else:
            got_content = self._text(choice.get("text"), self._content) or (choice.get("text") == "" and not reason)
        if got_content or got_other:
            self._token(arrived_ns, content=got_content)

    @staticmethod
    def _text(value: object, sink: list[str]) -> bool:
        if isinstance(value, str) and value:
            sink.append(value)
            return True
        return False

    def _tool_deltas(self, deltas: object) -> bool:
        if not isinstance(deltas, list) or not deltas:
            return False
        for delta in deltas:
            if isinstance(delta, dict):
                self._tool_delta(delta)
        return True

    def _tool_delta(self, delta: dict[str, Any]) -> None:
        index = delta.get("index", len(self._tools))
        call = self._tools.setdefault(
            int(index), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if delta.get("id"):
            call["id"] = delta["id"]
        if delta.get("type"):
            call["type"] = delta["type"]
        function = delta.get("function")
        if isinstance(function, dict):
            if function.get("name"):
                call["function"]["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                call["function"]["arguments"] += function["arguments"]

    def _token(self, arrived_ns: int, *, content: bool) -> None:
        record = self.record
        record.chunk_ns.append(arrived_ns)
        record.client_token_count += 1
        if record.first_token_ns is None:
            record.first_token_ns = arrived_ns
        if content and record.first_content_ns is None:
            record.first_content_ns = arrived_ns


def _empty_token(delta: dict[str, Any], reason: object) -> bool:
    """A token whose text is still empty (the first bytes of a multi-byte character): it arrived, and counts as a
    token as `vllm bench serve` counts it. Not the role-only opening chunk, nor a bare finishing chunk."""
    return delta.get("content") == "" and "role" not in delta and not reason


def _plain_content(chunk: dict[str, Any]) -> str | None:
    """The text of a chunk that is one choice's ``{"content": ...}`` delta and nothing else the record keeps
    (no usage, timings, error, finish reason); None for anything else."""
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1 or "error" in chunk or "timings" in chunk:
        return None
    if chunk.get("usage") is not None:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason"):
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or len(delta) != 1:
        return None
    content = delta.get("content")
    return content if type(content) is str else None


def _apply_usage(record: RequestRecord, usage: dict[str, Any]) -> None:
    record.prompt_tokens = _int_or(usage.get("prompt_tokens"), record.prompt_tokens)
    record.completion_tokens = _int_or(usage.get("completion_tokens"), record.completion_tokens)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        record.cached_tokens = _int_or(details.get("cached_tokens"), record.cached_tokens)
    out_details = usage.get("completion_tokens_details")
    if isinstance(out_details, dict):
        record.reasoning_tokens = _int_or(out_details.get("reasoning_tokens"), record.reasoning_tokens)


def _int_or(value: object, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error", chunk)
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
