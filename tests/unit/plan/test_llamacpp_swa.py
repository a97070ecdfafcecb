"""The planner's llama.cpp SWA rule against llama-server's own two caches (``llama_kv_cache_iswa``) for a tiny
Gemma-3 GGUF: 10 sliding-window layers of 512 tokens and 2 global ones, random weights
(benchmarks/llamacpp/swa_buffers.sh wrote the logs and the model's config.json)."""

from pathlib import Path

import pytest

from servelab.plan import PlanRequest, compare_with, engine_request, make_plan, read_reported, resolve_model
from servelab.plan.engines import llamacpp_capacity

DATA = Path(__file__).resolve().parents[3] / "docs/data/llamacpp-swa-2026-12-01"
MIB = 2**20
RUNS = ["swa-c8k-np2", "swa-c32k-np4", "swa-c2k-np2", "swa-c16k-np1-q8", "swa-c8k-np2-ub256"]


def compared(name: str):  # type: ignore[no-untyped-def]
    reported = read_reported(str(DATA / f"{name}.log.gz"))
    base = PlanRequest(gpu_name="host", gpu_bytes=24 * 2**30, bandwidth_gbs=None, context=8192, concurrency=1,
                       quant=None, kv_dtype="auto", engine="llamacpp")  # fmt: skip
    request = engine_request(base, None, reported)
    resolved = resolve_model(str(DATA / "tiny-gemma3-config.json"))
    return reported, compare_with(resolved, request, make_plan(resolved, request), reported)


@pytest.mark.parametrize("name", RUNS)
def test_both_caches_exact(name: str) -> None:
    reported, comparison = compared(name)
    assert comparison.predicted_tokens == reported.tokens  # the non-SWA cache's cells x slots
    assert comparison.predicted_pool_bytes == pytest.approx(reported.available_bytes, abs=0.01 * MIB)  # both


def test_the_swa_rule_by_hand() -> None:
    """Per slot: min(cells, window + n_ubatch) padded to 256; 10 SWA layers x 1 KV head x 64 x 2 (K, V) x 2 B."""
    spec = resolve_model(str(DATA / "tiny-gemma3-config.json")).spec
    per_cell = 64 * 2 * 2
    cap = llamacpp_capacity(spec, 8192, 2, 2.0, 0)
    assert cap.bytes_per_sequence == 4096 * 2 * per_cell + 1024 * 10 * per_cell  # 512 + 512 -> 1024
    assert (
        llamacpp_capacity(spec, 8192, 2, 2.0, 0, ubatch=256).bytes_per_sequence
        == 4096 * 2 * per_cell + 768 * 10 * per_cell
    )
    assert llamacpp_capacity(spec, 2048, 2, 2.0, 0).bytes_per_sequence == 1024 * 12 * per_cell  # the slot is smaller
    assert llamacpp_capacity(spec, 8192, 2, 2.0, 0, swa_full=True).bytes_per_sequence == 4096 * 12 * per_cell
