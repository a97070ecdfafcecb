"""A failed start is classed from the engine's exit and its own log: real logs of vLLM 0.32 (CPU) and llama-server
0.3.36 started here with a bad flag, a refused value, or more memory than the host has."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from servelab.sweep import classify
from servelab.sweep.failures import TAIL_LINES

LOGS = Path(__file__).parent / "logs"


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


@pytest.mark.parametrize(
    ("log", "code", "kind", "said"),
    [
        ("vllm-unrecognized.log", 2, "flag refused", "unrecognized arguments: --no-such-flag"),
        ("vllm-batched-tokens-0.log", 1, "flag refused", "max_num_batched_tokens: Input should be greater than"),
        ("vllm-cpu-kv-space.log", 1, "out of memory", "less than requested memory for kv (64.0 GiB)"),
        ("llamacpp-invalid-argument.log", 1, "flag refused", "invalid argument: --no-such-flag"),
        ("llamacpp-kv-alloc.log", 1, "out of memory", "failed to allocate buffer for kv cache"),
    ],
)
def test_a_real_failed_start_is_classed_in_the_engines_own_words(log: str, code: int, kind: str, said: str) -> None:
    failure = classify(code, _lines(log))
    assert failure.kind == kind
    assert said in failure.reason
    assert failure.exit_code == code
    assert 0 < len(failure.log_tail) <= TAIL_LINES


def test_a_warning_that_mentions_an_error_is_not_why_it_stopped() -> None:
    """vLLM's ulimit warning says 'failed ... with error' on every start; a crash after it is still a crash."""
    warning = _lines("vllm-batched-tokens-0.log")[:20]
    assert any("WARNING" in line and "error" in line for line in warning)
    failure = classify(1, [*warning, "Segmentation fault (core dumped)"])
    assert failure.kind == "crash"
    assert "exited with code 1" in failure.reason


def test_the_start_timeout_is_a_timeout_whatever_the_log_says() -> None:
    failure = classify(None, _lines("vllm-cpu-kv-space.log")[:40], timed_out=True, timeout_s=90)
    assert failure.kind == "timeout"
    assert "90 s" in failure.reason


def test_a_kill_with_nothing_in_the_log_reads_as_the_oom_killer() -> None:
    failure = classify(-signal.SIGKILL, ["INFO loading weights"])
    assert failure.kind == "out of memory" and "SIGKILL" in failure.reason


def test_a_crash_keeps_the_last_error_line() -> None:
    failure = classify(139, ["INFO starting", "RuntimeError: something unexpected", "INFO cleaning up"])
    assert failure.kind == "crash"
    assert "exited with code 139" in failure.reason and "something unexpected" in failure.reason


def test_a_reason_holds_no_control_bytes_and_says_what_the_log_held() -> None:
    """A log may hold any bytes: the reason a table prints is printable; a SIGKILL after lines without an error says
    'no error in its log', not 'nothing'."""
    failure = classify(1, ["ERROR \x1b[31mbad\x00 thing\x07"])
    assert failure.reason.isprintable() and "bad" in failure.reason
    assert "no error in its log" in classify(-signal.SIGKILL, ["INFO loading weights"]).reason
    assert "nothing in its log" in classify(-signal.SIGKILL, []).reason
