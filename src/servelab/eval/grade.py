"""One outcome per reply, from two channels: strict (the exact format asked for) and semantic (the right
answer, wherever it sits in the reply).

correct           strict passes
format_violation  semantic passes, strict does not (right answer, wrong format: "42. Because ...")
wrong             neither passes
error             the request failed (HTTP error, disconnect, malformed stream, sandbox failure)
timeout           no answer in time, or the reply was cut at max_tokens (finish_reason "length")
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any

from servelab.core.records import ErrorClass, RequestRecord


class Outcome(enum.StrEnum):
    CORRECT = "correct"
    FORMAT_VIOLATION = "format_violation"
    WRONG = "wrong"
    ERROR = "error"
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class Grade:
    outcome: Outcome
    strict: bool
    semantic: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "strict": self.strict, "semantic": self.semantic, "detail": self.detail}


def from_channels(strict: bool, semantic: bool, detail: str = "") -> Grade:
    if strict:
        return Grade(Outcome.CORRECT, True, True, detail)
    if semantic:
        return Grade(Outcome.FORMAT_VIOLATION, False, True, detail)
    return Grade(Outcome.WRONG, False, False, detail)


def failed(record: RequestRecord) -> Grade | None:
    """The outcome of a request that gave no gradable reply, or None when it did."""
    if record.error is ErrorClass.TIMEOUT:
        return Grade(Outcome.TIMEOUT, False, False, record.error_detail or "timed out")
    if record.error is not None:
        return Grade(Outcome.ERROR, False, False, f"{record.error.value}: {record.error_detail or ''}".strip())
    if record.finish_reason == "length":
        return Grade(Outcome.TIMEOUT, False, False, "cut at max_tokens")
    return None


_INT = re.compile(r"(?<![\w.])-?\d[\d,]*(?![\w.]\d)")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_FENCE = re.compile(r"```[\w+-]*\n?(.*?)```", re.S)


def _clean(text: str) -> str:
    """The reply without surrounding whitespace, <think> blocks or markdown emphasis."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    return text.strip()


def _ints(text: str) -> list[int]:
    return [int(m.group().replace(",", "")) for m in _INT.finditer(text.replace("**", ""))]


def grade_integer(reply: str, answer: int) -> Grade:
    """Strict: the reply is the integer and nothing else. Semantic: the first or last integer in it."""
    text = _clean(reply)
    strict = re.fullmatch(r"-?\d+", text) is not None and int(text) == answer
    found = _ints(text)
    semantic = bool(found) and answer in (found[0], found[-1])
    return from_channels(strict, semantic, f"expected {answer}")


def grade_word(reply: str, answer: str) -> Grade:
    """Strict: one word, the expected one (case-insensitive). Semantic: the first or last word is it."""
    text = _clean(reply)
    strict = re.fullmatch(r"[A-Za-z][A-Za-z'-]*", text) is not None and text.lower() == answer.lower()
    words = [w.lower() for w in _WORD.findall(text.replace("*", ""))]
    semantic = bool(words) and answer.lower() in (words[0], words[-1])
    return from_channels(strict, semantic, f"expected {answer}")


def grade_exact(reply: str, answer: str) -> Grade:
    """Strict: exactly the expected text. Semantic: it appears in the reply (case-insensitive)."""
    text = _clean(reply)
    return from_channels(text == answer, answer.lower() in text.lower(), f"expected {answer!r}")


def grade_json(reply: str, answer: Any) -> Grade:
    """Strict: the reply parses as JSON equal to the answer. Semantic: a fenced or embedded JSON value in
    the reply equals it."""
    text = _clean(reply)
    strict = _loads(text) == (True, answer)
    semantic = strict or any(_loads(c) == (True, answer) for c in _json_candidates(text))
    return from_channels(strict, semantic, f"expected {json.dumps(answer)}")


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def _json_candidates(text: str) -> list[str]:
    out = [m.group(1).strip() for m in _FENCE.finditer(text)]
    for opener, closer in ("{}", "[]"):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            out.append(text[start : end + 1])
    return out


def grade_text(kind: str, reply: str, answer: Any) -> Grade:
    if kind == "integer":
        return grade_integer(reply, int(answer))
    if kind == "word":
        return grade_word(reply, str(answer))
    if kind == "json":
        return grade_json(reply, answer)
    if kind == "exact":
        return grade_exact(reply, str(answer))
    raise ValueError(f"no grader for kind {kind!r}")


def extract_code(reply: str) -> tuple[str, bool]:
    """(the code, whether the reply was only code): the first fenced block, else the whole reply."""
    text = _clean(reply)
    blocks = _FENCE.findall(text)
    if not blocks:
        return text, True
    only = _FENCE.sub("", text).strip() == "" and len(blocks) == 1
    return blocks[0], only


def grade_tool(calls: list[dict[str, Any]], content: str, expected: dict[str, Any] | None) -> Grade:
    """Native tool calls against the expected ``{"name", "arguments"}`` (None: no tool fits, none may be called).

    Strict: exactly one native call, the name right, the arguments valid JSON equal to the expected ones with
    the same JSON types. Semantic: the name right and the arguments equal once strings and numbers are read
    loosely, or the call written as JSON in the text instead of the tool channel."""
    if expected is None:
        if calls:
            return from_channels(False, False, f"called {_call_name(calls[0])} where no tool fits")
        return from_channels(True, True, "no tool called")
    want_name, want_args = expected["name"], expected.get("arguments", {})
    if calls:
        name = _call_name(calls[0])
        ok, args = _loads(str(calls[0].get("function", {}).get("arguments") or "{}"))
        strict = len(calls) == 1 and name == want_name and ok and _same(args, want_args)
        semantic = name == want_name and ok and _loose(args, want_args)
        return from_channels(strict, semantic, f"called {name}({json.dumps(args) if ok else 'invalid JSON'})")
    for text in [_clean(content), *_json_candidates(_clean(content))]:
        ok, value = _loads(text)
        if ok and isinstance(value, dict) and value.get("name") == want_name:
            args = value.get("arguments", value.get("parameters", {}))
            if isinstance(args, str):
                args = _loads(args)[1]
            if _loose(args, want_args):
                return from_channels(False, True, "the call was written as text, not a tool call")
    return from_channels(False, False, "no tool call")


def _call_name(call: dict[str, Any]) -> str:
    return str(call.get("function", {}).get("name", ""))


def _same(got: Any, want: Any) -> bool:
    """Equal with the same JSON types (an integer is not the string of it; 5 and 5.0 are one number)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and got == want
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    return type(got) is type(want) and got == want


def _loose(got: Any, want: Any) -> bool:
    """Equal when strings are compared case- and space-insensitively and numbers may come as strings;
    extra keys in ``got`` are tolerated."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _loose(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_loose, got, want))
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(str(got).strip()) == float(want)
        except ValueError:
            return False
    return str(got).strip().lower() == str(want).strip().lower()
