"""Every flag value is checked before any server is asked, and refused with what is wrong with it: a range with one
end, a negative token count, a file that is not there, a URL without a scheme, an SLO limit that is no time."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.cli import main

AT_LEAST_1 = "Invalid value for '--max-tokens': Input should be greater than or equal to 1"
BENCH = ["bench", "--target", "x=http://127.0.0.1:9"]  # port 9 (discard): never reached, every value refused first


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([*BENCH, "--scenario", "synthetic:100-:8"], "'100-' is not a count or LOW-HIGH (both ends given)"),
        ([*BENCH, "--scenario", "synthetic:100:8-"], "'8-' is not a count or LOW-HIGH"),
        ([*BENCH, "--max-tokens", "-5"], AT_LEAST_1),
        ([*BENCH, "--max-tokens", "0"], AT_LEAST_1),
        (
            [*BENCH, "--prefix-tokens", "-1"],
            "Invalid value for '--prefix-tokens': Input should be greater than or equal to 0",
        ),
        ([*BENCH, "--temperature", "3"], "Invalid value for '--temperature': Input should be less than or equal to 2"),
        ([*BENCH, "--scenario", "MISSING/traffic.jsonl"], "file not found: "),
        ([*BENCH, "--scenario", "code-chta"], "did you mean 'code-chat'?"),
        ([*BENCH, "--slo", "itl=-5ms"], "a limit is a time above 0"),
        ([*BENCH, "--goodput", "ttf=1s"], "did you mean 'ttft'?"),
        (["bench", "--target", "x=localhost:8000"], "'localhost:8000' has no scheme (http:// or https://)"),
        (["bench", "--target", "x=ftp://host"], "the scheme 'ftp'"),
        (["bench", "--target", "x=http://host:70000"], "a port that is not a number"),
        (["bench", "--target", "http://host:8000"], "got a URL without a name"),
        (["check", "--max-tokens", "0", "--skip", "bench"], AT_LEAST_1),
        (["coexist", "--probe", "http", "--tts-url", "localhost:5000"], "--tts-url: 'localhost:5000' has no scheme"),
        (["plan", "llama-3.1-8b", "--calibrate", "localhost:8000"], "--calibrate: no file 'localhost:8000'"),
        (["plan", "llama-3.1-8b", "--calibrate", "localhost://8000"], "the scheme 'localhost'"),
        (
            ["plan", "llama-3.1-8b", "--max-num-batched-tokens", "0"],
            "'--max-num-batched-tokens': Input should be greater",
        ),
        (
            ["gateway", "--config", "g.toml", "--port", "70000"],
            "Invalid value for '--port': Input should be less than or equal to 65535",
        ),
        (["plan", "llama-3.1-8b", "--engine", "llama.cpp"], "unknown engine 'llama.cpp'; did you mean 'llamacpp'?"),
        (["plan", "llama-3.1-8b", "--quant", "int-4"], "unknown quantization 'int-4'; did you mean 'int4'?"),
        (["plan", "llama-3.1-8b", "--kv-dtype", "fp-8"], "unknown KV cache dtype 'fp-8'; did you mean 'fp8'?"),
        (["plan", "llama-3.1-8b", "--gpu", "h10-80gb"], "unknown GPU 'h10-80gb'; did you mean 'h100-80gb'?"),
        (["plan", "lama-3.1-8b"], "did you mean 'llama-3.1-8b'?"),
        (
            ["plan", "llama-3.1-8b", "--headroom", "-5GiB"],
            "a size is a finite amount of memory, 0 or more, not '-5GiB'",
        ),
        (["plan", "llama-3.1-8b", "--alongside", "tts=infGiB"], "a size is a finite amount of memory"),
        (["plan", "llama-3.1-8b", "--gpu-mem", "0GiB"], "--gpu-mem '0GiB' is no GPU's memory"),
        (["runs", "list", "--limit", "0"], "'--limit': Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_value_is_refused_with_its_problem(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a.replace("MISSING", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    captured = capsys.readouterr()
    text = " ".join((captured.err + captured.out).split())  # the console wraps long lines
    assert said in text
    assert "Traceback" not in text
    assert "unknown scenario" not in text or "did you mean" in text  # a missing file is not called a scenario


def test_a_base_url_without_a_scheme_is_told_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "gpu-box:8000")
    assert main(["bench", "--scenario", "code-chat"]) == 2
    assert "OPENAI_BASE_URL: 'gpu-box:8000' has no scheme" in " ".join(capsys.readouterr().err.split())
