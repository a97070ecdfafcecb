"""gateway.toml: the upstreams (fixed: no open proxy), the policy's numbers, keys and limits."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servelab.core.known_keys import read_table, validate


class _Finite(BaseModel):
    """Every number finite: an infinite timeout or lease in the config is refused, not taken; a key not declared here
    is refused with the nearest one that is (core/known_keys.py), never left at its default."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid")


class Upstream(_Finite):
    url: str  # http://host:port (with or without /v1)
    model: str | None = None  # the external API's model name: the client's alias is rewritten to it
    api_key_env: str | None = None  # the environment variable holding its key
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0  # longest wait for the first byte (a long prefill is silent)
    health_path: str = "/health"
    # local only: the engine's model folder (tokenizer.json and its chat template), so that prompts are counted in
    # process; unset: the folder the engine names as its model's root in /v1/models when it is on this host, else
    # the engine's own /tokenize
    tokenizer: str | None = None
    # local only: the engine's --chat-template-content-format ("auto", its default, or "string" count as vLLM's
    # detection; "openai": every template is handed each message's content as a list of parts, and counted so)
    chat_template_content_format: Literal["auto", "string", "openai"] = "auto"
    # local only: the engine's --chat-template (a file or the template), which it renders every request with
    chat_template: str | None = None
    # local only: the engine's --default-chat-template-kwargs (e.g. {enable_thinking = false}), beneath a request's own
    default_chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    # a pooled connection idle longer than this is closed, not reused: keep it under the upstream's own keep-alive
    # timeout (uvicorn's, vLLM's: 5 s), since a request written as the upstream closes cannot be sent again
    pool_idle_s: float = Field(default=4.0, ge=0.0)

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class Policy(_Finite):
    prefill_threshold_tokens: int = Field(default=8000, ge=1)  # prompts over this go external (the cost gate)
    realtime_prefill_budget_tokens: int = Field(default=16000, ge=0)  # in-flight local prefill allowed while realtime
    bound_tokens_max: int = Field(default=1024, ge=0)  # a prompt whose byte bound is at most this is not tokenized
    min_hold_s: float = Field(default=5.0, ge=0.0)  # a flag stays at least this long before it may go back
    realtime_ttl_s: float = Field(default=30.0, gt=0.0)  # a realtime lease ends unless renewed
    health_interval_s: float = Field(default=2.0, gt=0.0)
    health_timeout_s: float = Field(default=2.0, gt=0.0)  # a busy engine's slow /health is not a down engine
    unhealthy_after: int = Field(default=2, ge=1)  # consecutive failed health checks
    healthy_after: int = Field(default=2, ge=1)  # consecutive good ones to come back
    keepalive_s: float = Field(default=10.0, ge=0.0)  # a stream silent this long gets ": keep-alive" comments (0: off)
    idle_timeout_s: float = Field(default=120.0, gt=0.0)  # an answer silent this long mid-body: ended (in band, or 504)


class Keys(BaseModel):
    model_config = ConfigDict(extra="forbid")

    clients: list[str] = []  # empty: clients need no key
    admin: list[str] = []  # empty: the admin endpoints are refused
    metrics: list[str] = []  # set: /metrics and /readyz want one of these (or an admin key)

    @field_validator("clients", "admin", "metrics")
    @classmethod
    def _no_blank_keys(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if not key or any(c.isspace() or not c.isprintable() for c in key):
                raise ValueError("a key may not be empty or hold whitespace or control characters")
        return keys


class Server(_Finite):
    """Limits of the gateway's own HTTP server (slow or oversized clients are cut off, not held)."""

    header_timeout_s: float = Field(default=10.0, gt=0.0)  # the whole request head must arrive within this
    body_timeout_s: float = Field(default=30.0, gt=0.0)  # the whole request body within this of its head
    body_pause_s: float = Field(default=10.0, gt=0.0)  # and no pause between its reads longer than this
    keepalive_s: float = Field(default=75.0, ge=0.0)  # an idle keep-alive connection is closed after this
    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    max_headers: int = Field(default=100, ge=8)
    max_connections: int = Field(default=10_000, ge=1)  # per worker, capped by its open files (gateway/slots.py)
    max_json_depth: int = Field(default=64, ge=4, le=200)
    busy_poll_us: int = Field(default=0, ge=0, le=1_000_000)  # poll without sleeping in flight and this long after
    # Poll from an upstream write to its first byte (at most this long) and poll_linger_us after an answer, while at
    # most poll_max_in_flight requests are in flight in a worker. None: 50 ms and 3,000 us on a host of 8 cores or
    # more, off below (gateway/poll.py).
    first_byte_poll_ms: int | None = Field(default=None, ge=0, le=10_000)
    poll_linger_us: int | None = Field(default=None, ge=0, le=1_000_000)
    poll_max_in_flight: int = Field(default=4, ge=1, le=10_000)
    warm_on_linger: bool = True  # while polling after an answer, rehearse the request path once (gateway/warm.py)
    access_log: bool = True  # one JSON line per request on stderr (route, reason, status, milliseconds)
    log_queue_lines: int = Field(default=10_000, ge=1, le=10_000_000)  # held while stderr is not read, then dropped


class State(_Finite):
    backend: Literal["memory", "host", "redis"] = "memory"  # host: worker processes of one host share a file
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "servelab:gateway:"
    path: str = ""  # the host store's file (default: /dev/shm/servelab-gateway-PORT.state)
    max_leases: int = Field(default=64, ge=1, le=256)  # leases of one flag held at once (past it: 409)
    charge_ttl_s: float = Field(default=10.0, ge=0.5, le=3600.0)  # a replica that stops renewing: its charges end
    timeout_s: float = Field(default=0.3, gt=0.0, le=10.0)  # the longest wait on one Redis call
    retry_s: float = Field(default=0.5, gt=0.0, le=60.0)  # after a Redis fault: left alone this long, then probed


class Record(_Finite):
    """The traffic as a replayable trace (off when ``path`` is empty): gateway/record.py."""

    path: str = ""
    block_tokens: int = Field(default=512, ge=16, le=1 << 20)  # tokens a hash id stands for (Mooncake's 512)


class GatewayConfig(_Finite):
    host: str = "127.0.0.1"
    port: int = Field(default=8900, ge=0, le=65535)  # 0: any free port (one process only)
    local: Upstream
    external: Upstream | None = None
    policy: Policy = Field(default_factory=Policy)
    keys: Keys = Field(default_factory=Keys)
    state: State = Field(default_factory=State)
    server: Server = Field(default_factory=Server)
    record: Record = Field(default_factory=Record)
    workers: int = Field(default=1, ge=1, le=256)
    max_body_bytes: int = Field(default=16 * 2**20, ge=1024)
    strip_for_external: list[str] = [
        "ignore_eos",
        "min_tokens",
        "top_k",
        "repetition_penalty",
        "guided_json",
        "guided_regex",
        "chat_template_kwargs",
        "skip_special_tokens",
    ]


def load_config(path: Path) -> GatewayConfig:
    return validate(GatewayConfig, read_table(path), str(path), hint="see the gateway section of the README")
