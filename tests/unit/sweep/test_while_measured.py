"""What the engine's log says while a point is measured: only the lines written after the measurement began, each
kind once with its first time and count (vLLM 0.25.1's own log of a Laguna-geometry start on an H100, 2026-12-06:
its fused-MoE kernel JIT-compiled during the 4-stream character-chat step, whose TTFT p95 was 1.6 s)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.sweep.startlog import log_size, while_measured

LOG = Path(__file__).parent / "logs" / "vllm-0.25.1-h100-laguna-jit.log"
JIT = ("(EngineCore pid=1) WARNING 12-06 10:0{0}:00 [jit_monitor.py:129] Triton kernel JIT compilation "
       "during inference: {1}. This causes a latency spike; consider extending warmup.")  # fmt: skip


def test_only_what_was_written_after_the_mark_counts() -> None:
    text = LOG.read_text()
    served = text.index("Application startup complete")
    assert while_measured(LOG, len(text[:served].encode())) == [
        "the engine JIT-compiled a Triton kernel (fused_moe_kernel) while measured at 12-06 09:42:37: the requests "
        "running then include the compile"
    ]
    every = while_measured(LOG, 0)  # from the start: the start's own graph compile too
    assert len(every) == 2 and "compiled a graph while measured at 12-06 09:41:09" in every[0]


def test_a_missing_log_says_nothing(tmp_path: Path) -> None:
    assert while_measured(tmp_path / "gone.log", 0) == [] and log_size(tmp_path / "gone.log") == 0


@settings(max_examples=50, deadline=None)
@given(before=st.lists(st.sampled_from("ab"), max_size=4), after=st.lists(st.sampled_from("abc"), max_size=6))
def test_each_kernel_once_with_its_first_time_and_count(tmp_path_factory, before: list[str], after: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Lines before the mark never count; after it, one entry per kernel, at its first time, with how often."""
    path = tmp_path_factory.mktemp("log") / "engine.log"
    path.write_text("".join(JIT.format(i % 10, f"k_{k}") + "\n" for i, k in enumerate(before)))
    mark = log_size(path)
    with path.open("a") as handle:
        handle.write("".join(JIT.format(i % 10, f"k_{k}") + "\nINFO noise\n" for i, k in enumerate(after)))
    said = while_measured(path, mark)
    kernels = list(dict.fromkeys(after))
    assert len(said) == len(kernels)
    for kernel, line in zip(kernels, said, strict=True):
        first, count = after.index(kernel), after.count(kernel)
        assert f"(k_{kernel})" in line and f"at 12-06 10:0{first % 10}:00" in line
        assert line.endswith(f" ({count} times)") == (count > 1)


def test_speculative_acceptance_is_summed_over_the_lines_after_the_mark(tmp_path: Path) -> None:
    """vLLM's own SpecDecoding line (v1/spec_decode/metrics.py), twice after the mark and once before it."""
    line = ("(APIServer pid=1) INFO 12-06 10:00:0{0} [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
            "1.50, Accepted throughput: 3.00 tokens/s, Drafted throughput: 9.00 tokens/s, Accepted: {1} tokens, "
            "Drafted: {2} tokens, Per-position acceptance rate: 0.400, 0.100, 0.000, Avg Draft acceptance rate: "
            "16.7%\n")  # fmt: skip
    path = tmp_path / "engine.log"
    path.write_text(line.format(0, 999, 1000))
    mark = log_size(path)
    with path.open("a") as handle:
        handle.write(line.format(1, 30, 180) + "noise\n" + line.format(2, 1, 1_020))
    assert while_measured(path, mark) == [
        "speculative decoding: 31 of 1,200 drafted tokens accepted (2.6%) in vLLM's logged intervals while measured "
        "(warm-up included; the last interval is not logged)"
    ]
