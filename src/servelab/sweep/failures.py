"""Why a configuration did not start, read from the engine's exit and its log's last lines, in its own words.

The classes are decided in this order, so a log that says two things is classed by the one that stopped the start:
a start that outlived its timeout is ``timeout``; a log line that says memory ran out (CUDA, a buffer llama.cpp could
not allocate, vLLM's KV pool too small for one request or larger than the host's memory, the kernel's OOM killer's
SIGKILL) is ``out of memory``; a line where the engine refused a flag or a value (argparse, llama.cpp's argument
parser, vLLM's config validation) is ``flag refused``; anything else is ``crash`` with the exit code and the log's
last error line. The reason kept is always the engine's own line (shortened), never ours, where the log has one.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

from servelab.core.results.sweep import FailureKind, PointFailure

READ_LINES = 400  # the log lines read for the reason (vLLM's cause can sit 150 lines above its last traceback)
TAIL_LINES = 40  # the last lines kept with the point
REASON_CHARS = 300

_OOM = re.compile(
    r"out of memory|OutOfMemoryError|CUDA error: out of memory|insufficient memory|failed to allocate"
    r"|No available memory for the cache blocks|larger than the available KV cache memory"
    r"|is less than requested memory for kv|Cannot allocate memory|std::bad_alloc|MemoryError",
    re.IGNORECASE,
)
_REFUSED = re.compile(
    r"error: unrecognized arguments|error: argument |error: invalid argument|invalid value for|invalid choice"
    r"|error while handling argument|ValidationError|Value error,|ValueError: |TypeError: .*argument"
    r"|is not supported|unsupported|NotImplementedError|must be (?:greater|less|at least|a )"
)
_ERRORISH = re.compile(r"error|Error|ERROR|failed|Traceback|exception|Exception|E ")
_NOISE = re.compile(r"^\s*(\[--|\[-|usage:|\s{10,})")  # argparse's usage block
_WARNING = re.compile(r"\bWARNING\b|Warning[:s]|^\d+\.\d+\.\d+\.\d+ W ")  # a warning never says why it stopped


def classify(exit_code: int | None, tail: Sequence[str], timed_out: bool = False, timeout_s: float = 0) -> PointFailure:
    """The failure class and the engine's own line that says why (see the module's rule)."""
    lines = [line.rstrip() for line in tail if line.strip()][-READ_LINES:]
    kept = lines[-TAIL_LINES:]
    if timed_out:
        last = lines[-1] if lines else "no log"
        return _failure("timeout", f"no answer on /health within {timeout_s:g} s; its last line: {_short(last)}",
                        exit_code, kept)  # fmt: skip
    kind, line = _by_log(lines)
    if kind is None and exit_code is not None and exit_code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        said = "with nothing in its log" if not lines else "with no error in its log"
        return _failure("out of memory", f"killed by SIGKILL {said}: the kernel's OOM killer?", exit_code, kept)
    if kind is None:
        said = f"exited with code {exit_code}" if exit_code is not None else "stopped"
        last = _last_error(lines)
        return _failure("crash", f"{said}: {_short(last)}" if last else said, exit_code, kept)
    return _failure(kind, _short(line), exit_code, kept)


def _by_log(lines: Sequence[str]) -> tuple[FailureKind | None, str]:
    """The first class whose pattern a line of the tail matches, latest line first within a class."""
    for kind, pattern in (("out of memory", _OOM), ("flag refused", _REFUSED)):
        for i in range(len(lines) - 1, -1, -1):
            line = lines[i]
            if pattern.search(line) and not _NOISE.match(line) and not _WARNING.search(line):
                return kind, line + _fields(lines, i)  # type: ignore[return-value]
    return None, ""


def _fields(lines: Sequence[str], i: int) -> str:
    """A pydantic ValidationError's first field and its message (the two lines after it), which say what was
    refused."""
    if "validation error" not in lines[i] or i + 2 >= len(lines):
        return ""
    return f": {lines[i + 1].strip()}: {lines[i + 2].strip()}"


def _last_error(lines: Sequence[str]) -> str:
    found = [line for line in lines if _ERRORISH.search(line) and not _NOISE.match(line) and not _WARNING.search(line)]
    return found[-1] if found else (lines[-1] if lines else "")


def _short(line: str) -> str:
    """The line as a reason: vLLM's process prefix dropped, no control bytes (a log may hold any), cut short."""
    text = re.sub(r"^\(\w+ pid=\d+\)\s*", "", line.strip())  # vLLM's process prefix
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _failure(kind: FailureKind, reason: str, exit_code: int | None, lines: Sequence[str]) -> PointFailure:
    return PointFailure(kind=kind, reason=reason, exit_code=exit_code, log_tail=list(lines))
