"""The whole vLLM plan, with no log, against what vLLM 0.25.1 logged on an H200 (dummy weights).

Each start is planned from its model folder and the flags its own log lists; docs/plan-calibration.md holds
the table (benchmarks/gpu/fit_overhead.py prints it) and says which starts the constants were fitted on."""

from pathlib import Path

import pytest

from servelab.plan import resolve_model
from tests.unit.plan.graphs_planned import planned_from_log

ROOT = Path(__file__).resolve().parents[3]
NEW, OLD = ROOT / "docs/data/h200-capacity-2026-12-01", ROOT / "docs/data/h200-2026-11-30"
MODELS = ROOT / "benchmarks/gpu/models"
GIB = 2**30
STARTS = {  # log -> model folder
    NEW / "smollm2-e8k.log.gz": "smollm2-135m",
    NEW / "llama8b-e8k.log.gz": "llama-3.1-8b",
    NEW / "llama8b-e2k.log.gz": "llama-3.1-8b",
    NEW / "llama8b-g8k.log.gz": "llama-3.1-8b",
    NEW / "llama8bfp8-e8k.log.gz": "llama-3.1-8b-fp8-block",
    NEW / "mixtral-e8k.log.gz": "mixtral-8x7b",
    NEW / "mixtral-e16k.log.gz": "mixtral-8x7b",
    NEW / "nemotron-e8k.log.gz": "nemotron-nano-9b-v2",
    NEW / "gptoss-e8k.log.gz": "gpt-oss-20b",
    NEW / "gptoss-g8k.log.gz": "gpt-oss-20b",
    NEW / "jamba-e8k.log.gz": "jamba-mini-1.7",
    NEW / "kimi-e8k.log.gz": "kimi-linear-48b-a3b",
    NEW / "dsv2lite-e2k.log.gz": "deepseek-v2-lite",
    NEW / "granite-hf-e8k.log.gz": "granite-4.0-h-tiny",  # with --hf-overrides (legacy layer_types)
    NEW / "falcon-long-e8k.log.gz": "falcon-h1-7b",
    NEW / "nemotron-e2k.log.gz": "nemotron-nano-9b-v2",
    NEW / "kimi-s64-e8k.log.gz": "kimi-linear-48b-a3b",
    NEW / "jamba-e2k.log.gz": "jamba-mini-1.7",
    NEW / "llama4-s64-e8k.log.gz": "llama-4-scout-16l",
    OLD / "deepseek-v2-lite.log": "deepseek-v2-lite",
    OLD / "gemma-3-27b-text.log": "gemma-3-27b-text",
    OLD / "qwen3-next-80b-a3b-fp8.log": "qwen3-next-80b-a3b-fp8",
    # Llama-4's three starts were documented misses (+3.2 to +3.65%) until the V1 runner's sampler phase was
    # modelled (session 28): its 3.30 and 2.96 GiB peaks are that phase, not chunked attention
    NEW / "llama4-e8k.log.gz": "llama-4-scout-16l",
    NEW / "llama4-e2k.log.gz": "llama-4-scout-16l",
    NEW / "llama4-nochunk-e8k.log.gz": "llama-4-scout-16l",
}
# within 1% on KV, the profile-run peak modelled more than 0.25 GiB off: Llama-4 at 64 sequences (its forward phase:
# 1.06 GiB logged, 1.41 modelled; Granite-4.0-H's and Falcon-H1's were off too until V1's sampler phase)
PEAK_OFF = {NEW / "llama4-s64-e8k.log.gz"}
MISSES = {  # documented: the plan is off by more than 1% here
    OLD / "laguna-s-2.1-dummy.log": "laguna-s-2.1-dummy",  # CUDA-graph estimate 2.21 GiB, modelled 1.18
}


def planned(log: Path, folder: str):  # type: ignore[no-untyped-def]
    return planned_from_log(log, MODELS / folder, "h200")


@pytest.mark.parametrize(("log", "folder"), STARTS.items(), ids=[p.name for p in STARTS])
def test_the_plan_lands_within_one_percent_of_vllm(log: Path, folder: str) -> None:
    plan, reported, _ = planned(log, folder)
    assert reported.tokens and abs(plan.capacity.tokens - reported.tokens) / reported.tokens < 0.01
    assert abs(plan.weights.bytes - (reported.weights_bytes or 0)) < 0.25 * GIB
    if reported.torch_peak_bytes is not None and log not in PEAK_OFF:  # DEBUG logs: the profile run's own figures
        assert abs(plan.overhead_parts["activation"] - reported.torch_peak_bytes) < 0.25 * GIB
        assert abs(plan.overhead_parts["non_torch"] - (reported.non_torch_bytes or 0)) < 0.02 * GIB
        assert abs(plan.overhead_parts["cudagraphs"] - (reported.cudagraph_bytes or 0)) < 0.02 * GIB


@pytest.mark.parametrize(("log", "folder"), MISSES.items(), ids=[p.name for p in MISSES])
def test_the_documented_misses_are_still_misses(log: Path, folder: str) -> None:
    """If one of these comes within 1%, docs/plan-calibration.md is out of date: update it and move the start."""
    plan, reported, comparison = planned(log, folder)
    assert reported.tokens and abs(plan.capacity.tokens - reported.tokens) / reported.tokens > 0.01
    # the capacity rules stay exact for them: given vLLM's own KV memory, its token count (log rounding aside)
    same = comparison.predicted_tokens_same_pool
    assert same is not None and abs(same - reported.tokens) / reported.tokens < 0.001


def test_the_recurrent_term_follows_the_dummy_requests_not_the_tokens() -> None:
    """vLLM's profile run splits max_num_batched_tokens over min(max_num_seqs, tokens) requests and the
    recurrent kernels keep one state per request: Kimi-Linear's peak fell 30.55 -> 2.90 GiB at
    --max-num-seqs 64, Nemotron-H's stayed 1.93 / 1.88 GiB from 8K to 2K tokens (1,024 requests both)."""
    from servelab.plan.engine_shape import EngineShape
    from servelab.plan.overhead import activation_peak, recurrent_extra

    kimi = resolve_model(str(MODELS / "kimi-linear-48b-a3b")).spec
    kda = next(layer.state for layer in kimi.layers if layer.state is not None and layer.state.family == "kda")
    assert recurrent_extra(kimi, 1024, 1) == pytest.approx(16 * recurrent_extra(kimi, 64, 1), rel=1e-6)
    assert recurrent_extra(kimi, 64, 1) == pytest.approx(55.3 * 64 * kda.elements(1)[1], rel=1e-6)
    nemotron = resolve_model(str(MODELS / "nemotron-nano-9b-v2")).spec
    at_8k = activation_peak(nemotron, EngineShape(max_num_batched_tokens=8192, max_num_seqs=1024))[0]
    at_2k = activation_peak(nemotron, EngineShape(max_num_batched_tokens=2048, max_num_seqs=1024))[0]
    at_512 = activation_peak(nemotron, EngineShape(max_num_batched_tokens=512, max_num_seqs=1024))[0]
    assert at_8k - at_2k < 0.15 * GIB  # the same 1,024 requests: only the per-token buffers differ
    assert at_2k - at_512 > 0.5 * GIB  # 512 requests: half the states
