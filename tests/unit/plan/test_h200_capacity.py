"""The planner against vLLM 0.25.1 on an H200 (dummy weights), as recorded in docs/data.

docs/plan-calibration.md says how the record was made (benchmarks/gpu/capacity.sh).
"""

import json
from pathlib import Path

import pytest

from servelab.plan import VllmOptions, resolve_model, vllm_layout
from servelab.plan.quant import GIB, estimate_weights

ROOT = Path(__file__).resolve().parents[3]
RECORD = json.loads((ROOT / "docs" / "data" / "h200-capacity-2026-11-30.json").read_text())
MODELS = ROOT / "benchmarks" / "gpu" / "models"
KV = {"laguna-s-2.1-dummy": 1.0}
QUANT = {"laguna-s-2.1-dummy": "fp8", "qwen3-next-80b-a3b-fp8": "fp8"}


def layout(name: str) -> object:
    spec = resolve_model(str(MODELS / name)).spec
    return vllm_layout(spec, VllmOptions(max_model_len=32768, kv_dtype_bytes=KV.get(name, 2.0)))


@pytest.mark.parametrize("name", sorted(RECORD["models"]))
def test_capacity_rules_reproduce_vllms_own_figure(name: str) -> None:
    seen = RECORD["models"][name]
    lay = layout(name)
    if seen["num_gpu_blocks"] is not None:  # exact: vLLM's block count through our rules
        tokens = int(seen["num_gpu_blocks"] / lay.blocks_per_request * lay.max_model_len)  # type: ignore[attr-defined]
        assert tokens == seen["kv_cache_tokens"]
    else:  # the log rounds the KV memory to 0.01 GiB
        low, high = (lay.capacity_tokens(int((seen["available_kv_gib"] + d) * GIB)) for d in (-0.005, 0.005))  # type: ignore[attr-defined]
        assert low <= seen["kv_cache_tokens"] <= high


@pytest.mark.parametrize("name", sorted(RECORD["models"]))
def test_weight_estimate_within_half_a_gib_of_what_vllm_loaded(name: str) -> None:
    spec = resolve_model(str(MODELS / name)).spec
    estimate = estimate_weights(spec, QUANT.get(name, "bf16"))
    assert abs(estimate.gib - RECORD["models"][name]["weights_gib"]) < 0.5
