"""The flat per-request record every figure is computed from.

All ``*_ns`` fields are ``time.perf_counter_ns()`` readings on the client, taken when the
bytes arrived at the socket, before any parsing. ``None`` means "did not happen".
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class ErrorClass(enum.StrEnum):
    """Why a request did not end normally. ``None`` on a record means it did."""

    CONNECT = "connect"  # connection refused / DNS / TLS handshake
    TIMEOUT = "timeout"  # no byte (or no further byte) within the limit
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    DISCONNECT = "disconnect"  # the server closed the stream before [DONE] / end of body
    MALFORMED = "malformed"  # SSE or JSON the client could not understand
    STREAM_ERROR = "stream_error"  # an in-band {"error": ...} event, or a finish_reason of "abort"
    CANCELLED = "cancelled"  # the run stopped the request
    CLIENT = "client"  # a bug on our side, kept as data rather than raised


@dataclass(frozen=True, slots=True)
class Labels:
    """Where a request belongs in its run, as fields (``scenario`` on the record is only its display name)."""

    step: str = ""  # the step as its capability names it: a bench scenario at its level, an eval suite item
    level: int | None = None  # closed-loop concurrency
    rate: float | None = None  # open-loop requests per second
    phase: str | None = None  # "warmup", "cold", "warm"
    sweep_of: str | None = None  # a sweep's step: the scenario it is a level (or rate) of
    condition: str | None = None  # coexist: the condition the LLM load ran under
    suite: str | None = None  # eval
    item: str | None = None
    repeat: int | None = None
    turn: int | None = None  # a multi-turn item's turn, from 1 (a session's too)
    session: int | None = None  # a session workload's session, from 0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Labels:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    @classmethod
    def from_scenario(cls, scenario: str) -> Labels:
        """The labels of a record stored before labels were fields, read from its packed scenario string
        (``name@c4``, ``name@r2``, ``name:warm``, ``llm-decode@prefill``, ``suite/item#2+3``)."""
        if scenario in ("warmup", ""):
            return cls(step=scenario, phase="warmup" if scenario else None)
        if "#" in scenario and "/" in scenario.rpartition("#")[0]:
            head, _, tail = scenario.rpartition("#")
            suite, _, item = head.partition("/")
            repeat, _, turn = tail.partition("+")
            if repeat.isdigit() and (not turn or turn.isdigit()):
                return cls(step=scenario, suite=suite, item=item, repeat=int(repeat), turn=int(turn or 1))
        base, phase = scenario, None
        for p in ("cold", "warm"):
            if base.endswith(f":{p}"):
                base, phase = base.removesuffix(f":{p}"), p
        name, _, tail = base.rpartition("@")
        if name and tail[:1] == "c" and tail[1:].isdigit():
            return cls(step=base, level=int(tail[1:]), phase=phase, sweep_of=name)
        if name and tail[:1] == "r":
            try:
                return cls(step=base, rate=float(tail[1:]), phase=phase, sweep_of=name)
            except ValueError:
                pass
        if name and tail:
            return cls(step=name, condition=tail, phase=phase)
        return cls(step=base, phase=phase)


@dataclass(slots=True)
class RequestRecord:
    """One request, as the client saw it."""

    request_id: str
    endpoint: str  # "chat" or "completions"
    scenario: str = ""
    target: str = ""
    model: str = ""
    # timestamps, perf_counter_ns
    scheduled_ns: int | None = None
    sent_ns: int | None = None
    headers_ns: int | None = None
    first_byte_ns: int | None = None
    first_token_ns: int | None = None  # first token of any kind: reasoning, content or tool call
    first_content_ns: int | None = None
    end_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)  # one per SSE event that carried a token delta
    # what came back
    http_status: int | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None  # server usage
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    reasoning_tokens: int | None = None
    client_token_count: int = 0  # token-bearing deltas counted by the client (a cross-check)
    output_text: str = ""
    reasoning_text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    server_timings: dict[str, Any] | None = None  # llama.cpp's `timings`
    error: ErrorClass | None = None
    error_detail: str | None = None
    labels: Labels = field(default_factory=Labels)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["error"] = self.error.value if self.error else None
        data["labels"] = self.labels.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        data = dict(data)
        err = data.get("error")
        data["error"] = ErrorClass(err) if err else None
        labels = data.get("labels")
        data["labels"] = (
            Labels.from_dict(labels) if isinstance(labels, dict) else Labels.from_scenario(data.get("scenario", ""))
        )
        return cls(**data)
