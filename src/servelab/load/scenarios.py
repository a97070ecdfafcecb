"""Workloads as data: prompt shapes, lengths and concurrency (scenarios.json), plus the user's files."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.core.errors import UsageError
from servelab.core.known_keys import nearest, refuse_unknown
from servelab.load.datasets import OnBad, Prompt, Synthetic, parse_synthetic, read_dataset

# the keys of a scenario in scenarios.json; one with a "base" takes only the keys it may override
SPEC_KEYS = ("base", "description", "system", "history", "user", "max_tokens", "concurrency", "prefix_tokens", "cache")
BASED_KEYS = ("base", "description", "max_tokens", "concurrency")
CACHE_MODES = ("cold", "cold-then-warm")
DATA_SUFFIXES = (".jsonl", ".json", ".ndjson", ".txt")

if TYPE_CHECKING:
    from servelab.load.sessions.spec import SessionSpec
    from servelab.load.sessions.trace import Trace

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
    prompts: tuple[Prompt, ...] = field(default=())  # a dataset's requests, used in turn
    prefix_text: str | None = None  # the long prefix, once fitted to prefix_tokens with the target's tokenizer
    rate: float | None = None  # open loop at this many requests per second (a rate sweep's step)
    sweep_of: str | None = None  # a sweep's step: the scenario it is a level (or rate) of
    synthetic: Synthetic | None = None  # N tokens in, M out (fixed or drawn per request)
    tokens_per_line: float = 12.0  # of the filler text, as the target counts it (measured before a synthetic run)
    notes: tuple[str, ...] = ()  # what reading the data left out (lines skipped)
    sessions: SessionSpec | None = None  # a session workload: turns over a growing history (load.sessions)
    trace: Trace | None = None  # a trace replayed at its own times, its prefix sharing kept (load.sessions.trace)

    def messages(self, request_index: int, nonce: str) -> list[dict[str, str]]:
        """The chat for one request; ``nonce`` heads the system prompt so the prefix cache cannot hit."""
        system = f"[{nonce}] {self.system}" if nonce else self.system
        if self.prefix_tokens:
            system += "\n\n" + (self.prefix_text or filler_text(self.prefix_tokens, seed=self.name))
        turns = list(self.history_turns(request_index))
        if turns and turns[0][0] == "system":  # the data's own system prompt, headed by the nonce
            system, turns = " ".join(x for x in (system.strip(), turns[0][1]) if x), turns[1:]
        head = [{"role": "system", "content": system}] if system else []
        return [*head, *({"role": role, "content": text} for role, text in turns)]

    def history_turns(self, request_index: int) -> tuple[tuple[str, str], ...]:
        """The request's turns after the scenario's system prompt: the data's, a synthetic prompt, or the scenario's
        history and question."""
        if self.prompts:
            return self.prompts[request_index % len(self.prompts)].messages
        if self.synthetic is not None:
            tokens, _ = self.synthetic.lengths(request_index)
            lines = max(1, round(tokens / self.tokens_per_line))
            return (("user", filler_text(0, f"{self.name}:{request_index}", lines=lines)),)
        history = tuple(turn for user, assistant in self.history for turn in (("user", user), ("assistant", assistant)))
        return (*history, ("user", self.user))

    def output_tokens(self, request_index: int) -> int:
        """The request's output length: the data's (a line's max_tokens, a recorded reply's length), the synthetic
        draw, else the scenario's."""
        if self.prompts:
            return self.prompts[request_index % len(self.prompts)].max_tokens or self.max_tokens
        if self.synthetic is not None:
            return self.synthetic.lengths(request_index)[1]
        return self.max_tokens


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
    return list(_builtin()) + session_names()


def session_names() -> list[str]:
    from servelab.load.sessions.spec import preset_names

    return preset_names()


def _from_dict(name: str, raw: dict[str, Any], table: dict[str, dict[str, Any]]) -> Scenario:
    """A scenario of the table; a key it does not know is refused (a based one takes only the keys it overrides)."""
    refuse_unknown(raw, BASED_KEYS if "base" in raw else SPEC_KEYS, f"scenario {name!r}")
    if raw.get("cache", "cold") not in CACHE_MODES:
        raise UsageError(f"scenario {name!r}: cache is one of {', '.join(CACHE_MODES)}, not {raw['cache']!r}")
    if "base" in raw:
        if raw["base"] not in table:
            raise UsageError(f"scenario {name!r}: no scenario {raw['base']!r} to base it on")
        base = _from_dict(raw["base"], table[raw["base"]], table)
        overrides = {k: v for k, v in raw.items() if k != "base"}
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


def load_scenario(spec: str, on_bad: OnBad = "stop") -> Scenario:
    """A built-in name, ``synthetic:IN:OUT``, a session preset or spec (``.toml``), or a file of your traffic
    (JSONL, OpenAI messages, ShareGPT)."""
    from servelab.load.sessions.scenario import session_scenario  # the sessions package imports this module

    table = _builtin()
    if spec in table:
        return _from_dict(spec, table[spec], table)
    if (sessions := session_scenario(spec)) is not None:
        return sessions
    if spec.startswith("synthetic:"):
        synthetic = parse_synthetic(spec)
        return Scenario(name=spec, description=f"{spec} tokens in:out", synthetic=synthetic)
    path = Path(spec)
    if path.is_file():
        data = read_dataset(path, on_bad)
        return Scenario(name=path.stem, description=f"prompts from {path}", prompts=data.prompts, notes=data.skipped)
    raise _not_a_scenario(spec, path, list(table))


def _not_a_scenario(spec: str, path: Path, names: list[str]) -> UsageError:
    """What ``spec`` was meant to be, said: a file that is not there, a folder, or a name like a built-in one."""
    if path.is_dir():
        return UsageError(f"{spec} is a folder, not a file of prompts", hint="give the .jsonl or ShareGPT file itself")
    if "/" in spec or path.suffix.lower() in DATA_SUFFIXES:
        return UsageError(f"file not found: {spec}", hint="a .jsonl / ShareGPT file of prompts, by its path")
    guess = nearest(spec, [*names, "seed-000"])
    said = f"unknown scenario {spec!r}" + (f"; did you mean {guess!r}?" if guess else "")
    return UsageError(
        said,
        hint=f"built in: {', '.join(names)}; sessions: {', '.join(session_names())}; synthetic:IN:OUT; "
        "a session spec (.toml); or a .jsonl / ShareGPT file of prompts",
    )


def expand(specs: list[str], on_bad: OnBad = "stop") -> list[Scenario]:
    names: list[str] = []
    for spec in specs:
        names += list(SEED_000) if spec == "seed-000" else [spec]
    return [load_scenario(n, on_bad) for n in names]


def read_prompts(path: Path) -> list[str]:
    """The user prompt of every record of a dataset file (see :func:`servelab.load.datasets.read_dataset`)."""
    return [p.user for p in read_dataset(path).prompts]
