"""The start-log readers (``servelab plan --calibrate LOG``, the sweep's logged figures) as a hostile log would try
them: a log holding two starts is read as its last one, never a mix, and one whose last start got no KV cache is
said; numbers are read whole or not at all; any text gives figures or a clear error, never a traceback."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.core.errors import UsageError
from servelab.plan.calibrate import parse_log
from servelab.sweep.startlog import logged

LOGS = Path(__file__).resolve().parents[1] / "sweep/logs"
VLLM = (LOGS / "vllm-0.25.1-h100-laguna-jit.log").read_text()
KV_LINE = ("llama_kv_cache: size =   96.00 MiB (  4096 cells,  30 layers,  1/1 seqs), K (f16):   48.00 MiB, "
           "V (f16):   48.00 MiB")  # fmt: skip
LLAMA = (  # llama-server's lines as llama.cpp writes them (load, context, its cache)
    "load_tensors: loading model tensors, this can take a while... (load_mode = mmap)\n"
    "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB\n"
    "llama_context: constructing llama_context\nllama_context: n_seq_max     = 1\n"
    f"llama_context: n_ctx_seq     = 4096\n{KV_LINE}\nllama_context:        CPU compute buffer size =   100.0 MiB\n"
)
SECOND = (
    "(APIServer pid=9) INFO 12-06 10:00:00 [api_utils.py:273] non-default args: {'model': 'm', "
    "'max_model_len': 8192, 'kv_cache_dtype': 'fp8', 'gpu_memory_utilization': 0.5}\n"
    "(EngineCore pid=10) INFO 12-06 10:00:09 [core.py:114] Initializing a V1 LLM engine (v0.25.1) with config: x\n"
    "(EngineCore pid=10) INFO 12-06 10:00:19 [gpu_model_runner.py:5306] Model loading took 54.35 GiB memory\n"
)


def test_a_vllm_log_of_two_starts_reads_as_the_last() -> None:
    first = parse_log(VLLM)
    assert first.tokens == 492_156 and first.engine_args is not None and first.engine_args.max_model_len == 131072
    with pytest.raises(UsageError, match=r"last start .* logged no KV cache size"):
        parse_log(VLLM + SECOND)  # the second start died before its KV cache: nothing of the first is lent to it
    again = parse_log(VLLM + SECOND + VLLM)  # a third start that got there: its own figures and flags
    assert again.tokens == first.tokens and again.engine_args == first.engine_args


def test_a_llamacpp_log_whose_last_context_got_no_cache_is_said(tmp_path: Path) -> None:
    """A probe context that allocated, then the real one that failed: the sweep keeps the point, its figure said."""
    assert parse_log(LLAMA).tokens == 4096
    cut = LLAMA[LLAMA.index("llama_context: constructing") :].split("llama_kv_cache: size")[0]
    log = tmp_path / "llama.log"
    log.write_text(LLAMA + cut + "main: error: failed to allocate the KV cache\n")
    with pytest.raises(UsageError, match=r"last start .* no llama_kv_cache size"):
        parse_log(log.read_text())
    found = logged(log, "llamacpp")
    assert found.kv_tokens is None and found.error and "no llama_kv_cache size" in found.error


@pytest.mark.parametrize(
    "line",
    ["GPU KV cache size: , tokens", "GPU KV cache size: ,,, tokens", "GPU KV cache size: 1,2,3 tokens"],
)
def test_a_kv_size_that_is_no_number_is_no_figure(line: str) -> None:
    with pytest.raises(UsageError, match="no 'KV cache size"):
        parse_log(f"INFO {line}\n")


def test_a_figure_that_is_no_number_is_left_out() -> None:
    text = VLLM.replace("Model loading took 54.35 GiB", "Model loading took 1.2.3 GiB")
    assert parse_log(text).weights_bytes is None and parse_log(text).tokens == 492_156


PIECES = [
    "GPU KV cache size: ", "CPU KV cache size: ", "492,156", " tokens", "Model loading took ", "54.35", " GiB",
    "Available KV cache memory: ", "Estimated CUDA graph memory: ", " GiB total", "\n", "non-default args: {",
    "'max_model_len': 8192}", "'compilation_config': {'cudagraph_mode': 'x'}}", "Initializing a V1 LLM engine",
    "llama_context: constructing llama_context", KV_LINE, "Maximum concurrency for 8,192 tokens per request: 1.5x",
    "torch peak memory increase: 1.2GiB; non-torch forward increase memory: 0.2GiB", "1.2.3", "", "\x00", "GPU ",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=20)), max_size=40))
def test_any_log_gives_figures_or_a_clear_error(parts: list[str]) -> None:
    try:
        reported = parse_log("".join(parts))
    except UsageError:
        return
    assert reported.tokens is not None and reported.tokens >= 0
    for figure in (reported.available_bytes, reported.weights_bytes, reported.cudagraph_bytes):
        assert figure is None or figure >= 0
