"""Workloads as data: prompt shapes, lengths and concurrency (scenarios.json), plus the user's files."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.core.errors import UsageError

SEED_000 = ("code-chat", "character-chat", "studio-enhance", "concurrent-4")
FILLER_WORDS = (
    "module",
    "function",
    "returns",
    "value",
    "config",
    "request",
    "cache",
    "token",
    "buffer",
    "stream",
    "parse",
    "index",
    "record",
    "worker",
    "queue",
    "thread",
    "socket",
    "header",
    "payload",
    "schema",
    "client",
    "server",
)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str = ""
    system: str = ""
    history: tuple[tuple[str, str], ...] = ()
    user: str = ""
    max_tokens: int = 128
    concurrency: int = 1
    prefix_tokens: int = 0  # a long shared document put before the question
    cache: str = "cold"  # "cold" (a unique prefix per request) or "cold-then-warm"
    prompts: tuple[str, ...] = field(default=())  # user prompts from a file, used in turn
    prefix_text: str | None = None  # the long prefix, once fitted to prefix_tokens with the target's tokenizer
    rate: float | None = None  # open loop at this many requests per second (a rate sweep's step)
    sweep_of: str | None = None  # a sweep's step: the scenario it is a level (or rate) of

    def messages(self, request_index: int, nonce: str) -> list[dict[str, str]]:
        """The chat for one request; ``nonce`` heads the system prompt so the prefix cache cannot hit."""
        system = f"[{nonce}] {self.system}" if nonce else self.system
        if self.prefix_tokens:
            system += "\n\n" + (self.prefix_text or filler_text(self.prefix_tokens, seed=self.name))
        messages = [{"role": "system", "content": system}] if system else []
        for user, assistant in self.history:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        user = self.prompts[request_index % len(self.prompts)] if self.prompts else self.user
        return [*messages, {"role": "user", "content": user}]


def filler_text(approx_tokens: int, seed: str = "", *, lines: int | None = None) -> str:
    """Deterministic code-like text of about ``approx_tokens`` tokens (about one word per token), or of
    exactly ``lines`` lines."""
    rng = random.Random(seed)
    out = []
    for i in range(lines if lines is not None else max(1, approx_tokens // 10)):
        words = " ".join(rng.choice(FILLER_WORDS) for _ in range(6))
        out.append(f"line {i}: {words}.")
    return "\n".join(out)


def _builtin() -> dict[str, dict[str, Any]]:
    text = (resources.files("servelab.load") / "scenarios.json").read_text()
    data: dict[str, dict[str, Any]] = json.loads(text)
    return data


def scenario_names() -> list[str]:
    return list(_builtin())


def _from_dict(name: str, raw: dict[str, Any], table: dict[str, dict[str, Any]]) -> Scenario:
    if "base" in raw:
        base = _from_dict(raw["base"], table[raw["base"]], table)
        overrides = {k: v for k, v in raw.items() if k in ("concurrency", "max_tokens", "description")}
        return replace(base, name=name, **overrides)
    return Scenario(
        name=name,
        description=raw.get("description", ""),
        system=raw.get("system", ""),
        history=tuple((u, a) for u, a in raw.get("history", [])),
        user=raw.get("user", ""),
        max_tokens=int(raw.get("max_tokens", 128)),
        concurrency=int(raw.get("concurrency", 1)),
        prefix_tokens=int(raw.get("prefix_tokens", 0)),
        cache=raw.get("cache", "cold"),
    )


def load_scenario(spec: str) -> Scenario:
    """A built-in name, or a JSONL / ShareGPT file of prompts (``path.jsonl``)."""
    table = _builtin()
    if spec in table:
        return _from_dict(spec, table[spec], table)
    path = Path(spec)
    if path.is_file():
        return Scenario(name=path.stem, description=f"prompts from {path}", prompts=tuple(read_prompts(path)))
    raise UsageError(f"unknown scenario {spec!r}", hint=f"built in: {', '.join(table)}, or a .jsonl file of prompts")


def expand(specs: list[str]) -> list[Scenario]:
    names: list[str] = []
    for spec in specs:
        names += list(SEED_000) if spec == "seed-000" else [spec]
    return [load_scenario(n) for n in names]


def read_prompts(path: Path) -> list[str]:
    """JSONL lines with "prompt" or "text", or ShareGPT records: the first human turn of each."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    records: list[Any]
    try:
        records = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(x) for x in text.splitlines() if x.strip()]
        )
    except ValueError as exc:
        raise UsageError(f"{path} is neither JSONL nor a JSON list: {exc}") from exc
    prompts = [p for p in (_prompt_of(r) for r in records) if p]
    if not prompts:
        raise UsageError(f"no prompts in {path}", hint='each line needs "prompt", "text" or ShareGPT "conversations"')
    return prompts


def _prompt_of(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    for key in ("prompt", "text", "input"):
        if isinstance(record.get(key), str):
            return str(record[key])
    for turn in record.get("conversations") or []:
        if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
            return str(turn.get("value", ""))
    return None
