"""Eval items as data: the suites under ``eval/suites/`` (one JSON file each), plus generated ones (needle)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from servelab.core.errors import UsageError
from servelab.core.known_keys import refuse_unknown

ITEM_KEYS = ("id", "kind", "prompt", "answer", "category", "system", "max_tokens", "tools", "tests", "meta")
KINDS = ("integer", "word", "json", "exact", "tool", "code", "needle", "replay")


@dataclass(frozen=True)
class Item:
    id: str
    suite: str
    kind: str  # how the reply is graded: one of KINDS
    prompt: str
    answer: Any = None  # integer, word, JSON value, text; for "tool" {"name", "arguments"} or None
    category: str = ""
    system: str = ""
    max_tokens: int = 64
    tools: list[dict[str, Any]] = field(default_factory=list)
    tests: str = ""  # "code": pytest-style asserts run against the reply's code
    meta: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # "replay": the recorded turns before this one

    def messages(self) -> list[dict[str, Any]]:
        if self.history:
            return [dict(m) for m in self.history]
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": self.prompt}]


def builtin_suites() -> list[str]:
    return sorted(
        p.name.removesuffix(".json")
        for p in resources.files("servelab.eval.suites").iterdir()
        if p.name.endswith(".json")
    )


def load_suite(name: str) -> list[Item]:
    """A built-in suite by name."""
    if name not in builtin_suites():
        raise UsageError(f"no eval suite {name!r}", hint=f"one of {', '.join([*builtin_suites(), 'needle'])}")
    raw = json.loads((resources.files("servelab.eval.suites") / f"{name}.json").read_text())
    refuse_unknown(raw, ("description", "items", "tools"), f"suite {name!r}")
    return [_item(name, entry, raw.get("tools", {})) for entry in raw["items"]]


def _item(suite: str, entry: dict[str, Any], tools: dict[str, dict[str, Any]]) -> Item:
    refuse_unknown(entry, ITEM_KEYS, f"suite {suite!r} item {entry.get('id')!r}")
    if entry.get("kind") not in KINDS:
        raise ValueError(f"{suite}/{entry.get('id')}: kind {entry.get('kind')!r} is not one of {KINDS}")
    return Item(
        id=entry["id"],
        suite=suite,
        kind=entry["kind"],
        prompt=entry["prompt"],
        answer=entry.get("answer"),
        category=entry.get("category", ""),
        system=entry.get("system", ""),
        max_tokens=int(entry.get("max_tokens", 64)),
        tools=[tools[t] for t in entry.get("tools", [])],
        tests=entry.get("tests", ""),
        meta=entry.get("meta", {}),
    )
