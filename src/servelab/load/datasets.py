"""Your own traffic as a workload: JSONL lines (``prompt`` / ``text`` / ``input``, or an OpenAI ``messages`` list),
ShareGPT records (the first human turn, its recorded reply's length as the output length), each line's own
``max_tokens`` kept; a bad line named by its number, skipped or stopped at as the user says; and synthetic
"N tokens in, M out" workloads, fixed or drawn from a range."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servelab.core.errors import UsageError
from servelab.core.known_keys import near_miss

OnBad = Literal["stop", "skip"]
ROLES = ("system", "user", "assistant")
_OUTPUT_KEYS = ("max_tokens", "max_completion_tokens", "max_new_tokens", "output_tokens", "output_len")
# the keys a record is read from; another key is the data's own (an id, a source) unless it is a misspelling of one
RECORD_KEYS = ("prompt", "text", "input", "messages", "conversations", *_OUTPUT_KEYS)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request of a dataset: its chat (role, content), the output length the data gives, if any, and the
    recorded reply (ShareGPT), whose token count is the output length once the target has counted it."""

    messages: tuple[tuple[str, str], ...]
    max_tokens: int | None = None
    reply: str = ""

    @property
    def user(self) -> str:
        return next((c for r, c in reversed(self.messages) if r == "user"), "")


@dataclass(frozen=True, slots=True)
class Dataset:
    prompts: tuple[Prompt, ...]
    skipped: tuple[str, ...] = ()  # "FILE:LINE: why", for the lines skipped


def read_dataset(path: Path, on_bad: OnBad = "stop") -> Dataset:
    """Every usable record of ``path``; a record that is not one is an error naming its line, or skipped."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    prompts: list[Prompt] = []
    skipped: list[str] = []
    for where, record in _records(path, text, on_bad, skipped):
        try:
            prompts.append(prompt_of(record))
        except ValueError as exc:
            _bad(f"{path}:{where}: {exc}", on_bad, skipped)
    if not prompts:
        raise UsageError(f"no prompts in {path}", hint='each line needs "prompt", "text", "messages" or ShareGPT '
                         '"conversations"')  # fmt: skip
    return Dataset(tuple(prompts), tuple(skipped))


def _records(path: Path, text: str, on_bad: OnBad, skipped: list[str]) -> list[tuple[str, Any]]:
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{path}: not a JSON list: {exc}") from exc
        return [(f"item {i}", r) for i, r in enumerate(items, start=1)]
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"line {number}", json.loads(line)))
        except ValueError as exc:
            _bad(f"{path}:line {number}: not JSON ({exc}); the file is neither JSONL nor a JSON list", on_bad, skipped)
    return out


def _bad(message: str, on_bad: OnBad, skipped: list[str]) -> None:
    if on_bad == "stop":
        raise UsageError(message, hint="fix the line, or --bad-lines skip to leave such lines out")
    skipped.append(message)


def prompt_of(record: Any) -> Prompt:
    """A record as a prompt; ValueError saying what it lacks."""
    if not isinstance(record, dict):
        raise ValueError(f"a record is a JSON object, not {type(record).__name__}")
    miss = near_miss(record, RECORD_KEYS)
    if miss is not None:
        raise ValueError(f"unknown key {miss[0]!r}; did you mean {miss[1]!r}?")
    limit = _max_tokens(record)
    if isinstance(record.get("messages"), list):
        return Prompt(_messages(record["messages"]), limit)
    for key in ("prompt", "text", "input"):
        if isinstance(record.get(key), str) and record[key]:
            return Prompt((("user", record[key]),), limit)
    if isinstance(record.get("conversations"), list):
        return _sharegpt(record["conversations"], limit)
    raise ValueError('no "prompt", "text", "input", "messages" or "conversations"')


def _max_tokens(record: dict[str, Any]) -> int | None:
    for key in _OUTPUT_KEYS:
        value = record.get(key)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f'"{key}" is a whole number of tokens over 0, not {value!r}')
            return value
    return None


def _messages(raw: list[Any]) -> tuple[tuple[str, str], ...]:
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}] wants a role ({', '.join(ROLES)}) and a text content")
        out.append((str(m["role"]), str(m["content"])))
    if not out or out[-1][0] != "user":
        raise ValueError("the messages end with a user turn (the one this request asks)")
    return tuple(out)


def _sharegpt(turns: list[Any], limit: int | None) -> Prompt:
    human = next((i for i, t in enumerate(turns) if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
    if human is None or not isinstance(turns[human].get("value"), str) or not turns[human]["value"]:
        raise ValueError("a ShareGPT record with no human turn")
    after = turns[human + 1] if human + 1 < len(turns) else None
    reply = str(after.get("value", "")) if isinstance(after, dict) and after.get("from") in ("gpt", "assistant") else ""
    return Prompt((("user", turns[human]["value"]),), limit, reply)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


@dataclass(frozen=True, slots=True)
class Synthetic:
    """``synthetic:IN:OUT`` with each a count or a range LOW-HIGH (uniform, seeded by the request's index)."""

    input_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    seed: int = 0

    def lengths(self, index: int) -> tuple[int, int]:
        rng = random.Random(f"{self.seed}:{index}")
        return rng.randint(*self.input_tokens), rng.randint(*self.output_tokens)


def parse_synthetic(spec: str) -> Synthetic:
    """``synthetic:512:128``, ``synthetic:256-1024:64-256``."""
    parts = spec.split(":")
    if len(parts) != 3 or parts[0] != "synthetic":
        raise UsageError(
            f"cannot read {spec!r}", hint="synthetic:IN:OUT, each tokens or LOW-HIGH, like synthetic:512:128"
        )
    return Synthetic(_span(parts[1], "input"), _span(parts[2], "output"))


def _span(text: str, what: str) -> tuple[int, int]:
    """A count (``512``) or a range (``256-1024``), both ends given: ``100-`` is refused, never read as 100."""
    low, dash, high = text.partition("-")
    if not _digits(low) or (dash and not _digits(high)):
        raise UsageError(f"synthetic {what} tokens: {text!r} is not a count or LOW-HIGH (both ends given)",
                         hint="like synthetic:512:128 or synthetic:256-1024:64-256")  # fmt: skip
    span = (int(low), int(high or low))
    if not 1 <= span[0] <= span[1]:
        raise UsageError(f"synthetic {what} tokens: {text!r} wants 1 <= LOW <= HIGH")
    return span
