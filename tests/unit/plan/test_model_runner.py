"""Which vLLM model runner a plan assumes, and so whether CUDA graphs come out of the KV cache.

vLLM 0.25.1 runs a model neither hybrid nor attention-free that is dense (or DeepSeek-V2, Qwen2-MoE,
GraniteMoe) on its V2 runner, which deducts no CUDA graphs; every other model, and any model with ngram or
draft-model speculation, on V1, which deducts its estimate. The H100 start below is a DEBUG log of a dense
model with CUDA graphs on (docs/data/h100-2026-12-06-s25, docs/sweep.md "Session 25")."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.core.errors import UsageError
from servelab.plan import (
    compare_with,
    engine_request,
    make_plan,
    parse_engine_args,
    read_reported,
    resolve_model,
    with_engine_args,
)
from servelab.plan.engine_args import speculative_method
from tests.unit.plan.graphs_planned import graphs_planned, h100_request

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "benchmarks/gpu/models"
H100 = ROOT / "docs/data/h100-2026-12-06-s25"
GIB = 2**30
NGRAM = """--speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'"""
# folder -> whether vLLM 0.25.1 runs it on the V2 runner (no CUDA-graph deduction) without speculation
RUNNER_V2 = {
    "llama-3.1-8b": True,  # dense
    "gemma-3-27b-text": True,  # dense, sliding windows
    "deepseek-v2-lite": True,  # an MoE vLLM lists for V2
    "mixtral-8x7b": False,  # other MoEs: V1
    "gpt-oss-20b": False,
    "nemotron-nano-9b-v2": False,  # hybrid (Mamba-2), dense MLP: V1
    "qwen3-next-256e-fp8": False,  # hybrid MoE
}


@pytest.mark.parametrize(("folder", "v2"), RUNNER_V2.items())
def test_cuda_graphs_are_deducted_only_on_the_v1_runner(folder: str, v2: bool) -> None:
    assert (graphs_planned(folder, "") == 0) is v2
    assert graphs_planned(folder, "--enforce-eager") == 0  # no graphs, no deduction, either runner
    assert graphs_planned(folder, NGRAM) > 0  # ngram speculation sends every model to V1


def test_speculation_v2_runs_keeps_the_v2_runner_and_a_draft_model_does_not() -> None:
    eagle = """--speculative-config '{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'"""
    assert graphs_planned("llama-3.1-8b", eagle) == 0
    assert (
        graphs_planned("llama-3.1-8b", """--speculative-config '{"model": "org/small-draft"}'""") > 0
    )  # a draft model


@pytest.mark.parametrize(
    ("config", "method"),
    [
        ({"method": "ngram", "num_speculative_tokens": 4}, "ngram"),
        ({"method": "[ngram]"}, "ngram"),
        ({"model": "[ngram]", "num_speculative_tokens": 4}, "ngram"),
        ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}, "eagle"),
        ({"model": "AngelSlim/Qwen3-8B_eagle3"}, "eagle3"),
        ({"model": "z-lab/Qwen3-8B-DFlash-b16"}, "dflash"),
        ({"method": "deepseek_mtp"}, "mtp"),
        ({"model": "meta-llama/Llama-3.2-1B"}, "draft_model"),
    ],
)
def test_the_speculative_method_is_named_as_vllm_names_it(config: dict[str, object], method: str) -> None:
    assert speculative_method(json.dumps(config)) == method


@pytest.mark.parametrize("bad", ["{}", "[1]", "ngram", '{"num_speculative_tokens": 3}'])
def test_a_speculative_config_without_a_method_or_model_is_refused(bad: str) -> None:
    with pytest.raises(UsageError):
        speculative_method(bad)


@settings(max_examples=60, deadline=None)
@given(
    folder=st.sampled_from(sorted(RUNNER_V2)),
    seqs=st.sampled_from([4, 64, 256, 1024]),
    tokens=st.sampled_from([2048, 8192, 16384]),
    spec=st.sampled_from(["", NGRAM]),
)
def test_a_deduction_only_ever_lowers_the_kv_cache(folder: str, seqs: int, tokens: int, spec: str) -> None:
    """Whatever the flags, graphs on never plan more KV than eager, by exactly the graphs' deduction when the
    runner makes one (the profile-run peak does not depend on the runner)."""
    resolved = resolve_model(str(MODELS / folder))
    flags = f"--max-model-len 8192 --max-num-seqs {seqs} --max-num-batched-tokens {tokens} {spec}"
    on = make_plan(resolved, with_engine_args(h100_request(), parse_engine_args(flags)))
    off = make_plan(resolved, with_engine_args(h100_request(), parse_engine_args(f"{flags} --enforce-eager")))
    assert on.kv_pool_bytes == max(0, off.kv_pool_bytes - on.overhead_parts["cudagraphs"])
    assert on.capacity.tokens <= off.capacity.tokens


def test_the_h100_dense_start_with_graphs_deducts_none_and_lands_within_one_percent() -> None:
    log = H100 / "serve-dense-debug.log.gz"
    reported = read_reported(str(log))
    request = engine_request(h100_request(), None, reported)
    resolved = resolve_model(str(MODELS / "llama-3.1-8b"))
    plan = make_plan(resolved, request)
    assert request.enforce_eager is False and reported.cudagraph_bytes == 0 == plan.overhead_parts["cudagraphs"]
    assert reported.tokens and abs(plan.capacity.tokens - reported.tokens) / reported.tokens < 0.01
    assert reported.torch_peak_bytes is not None
    assert abs(plan.overhead_parts["activation"] - reported.torch_peak_bytes) < 0.25 * GIB
    same = compare_with(resolved, request, plan, reported).predicted_tokens_same_pool
    assert same is not None and abs(same - reported.tokens) / reported.tokens < 0.001
