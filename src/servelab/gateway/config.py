"""gateway.toml: the upstreams (fixed: no open proxy), the policy's numbers, keys and limits."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from servelab.core.errors import UsageError


class Upstream(BaseModel):
    url: str  # http://host:port (with or without /v1)
    model: str | None = None  # the external API's model name: the client's alias is rewritten to it
    api_key_env: str | None = None  # the environment variable holding its key
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0  # longest wait for the first byte (a long prefill is silent)
    health_path: str = "/health"

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class Policy(BaseModel):
    prefill_threshold_tokens: int = Field(default=8000, ge=1)  # prompts over this go external (the cost gate)
    realtime_prefill_budget_tokens: int = Field(default=16000, ge=0)  # in-flight local prefill allowed while realtime
    exact_band: float = Field(default=0.25, ge=0.0)  # estimates within this share of the threshold are counted exactly
    min_hold_s: float = Field(default=5.0, ge=0.0)  # a flag stays at least this long before it may go back
    realtime_ttl_s: float = Field(default=30.0, gt=0.0)  # a realtime lease ends unless renewed
    health_interval_s: float = Field(default=2.0, gt=0.0)
    unhealthy_after: int = Field(default=2, ge=1)  # consecutive failed health checks
    healthy_after: int = Field(default=2, ge=1)  # consecutive good ones to come back
    keepalive_s: float = Field(default=10.0, ge=0.0)  # a stream silent this long gets ": keep-alive" comments (0: off)
    idle_timeout_s: float = Field(default=120.0, gt=0.0)  # a started stream silent this long is ended in band


class Keys(BaseModel):
    clients: list[str] = []  # empty: clients need no key
    admin: list[str] = []  # empty: the admin endpoints are refused


class State(BaseModel):
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "servelab:gateway:"


class GatewayConfig(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(default=8900, ge=1, le=65535)
    local: Upstream
    external: Upstream | None = None
    policy: Policy = Field(default_factory=Policy)
    keys: Keys = Field(default_factory=Keys)
    state: State = Field(default_factory=State)
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
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: {where}: {first['msg']}", hint="see the gateway section of the README") from None
