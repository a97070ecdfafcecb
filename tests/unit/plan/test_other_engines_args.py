"""llama-server's and SGLang's flags in ``--engine-args`` are planned as given, like vLLM's: the settings they
name (llama.cpp's -c split over -np, no -c: the model's context a slot, -np absent or -1: its automatic 4; -ctk,
-ub, --swa-full; SGLang's tensor parallelism), the rest at the engine's defaults, the command the user's own; a
flag that changes the GPU's share in a way the plan does not model is refused by name. Once -np 4 was planned as
one slot, --swa-full and -ub were dropped, and SGLang at --tp-size 4 kept the whole model's KV on each GPU."""

from __future__ import annotations

import pytest

from servelab.core.errors import UsageError
from servelab.plan import PlanRequest, gpu, make_plan, parse_engine_args, resolve_model, with_engine_args


def _plan(model: str, engine: str, flags: str):  # type: ignore[no-untyped-def]
    card = gpu("h100-80gb")
    base = PlanRequest(gpu_name=card.key, gpu_bytes=card.memory_bytes, bandwidth_gbs=None, context=32768,
                       concurrency=1, quant=None, kv_dtype="auto", engine=engine)  # fmt: skip
    return make_plan(resolve_model(model), with_engine_args(base, parse_engine_args(flags, engine)))


def test_llama_servers_slots_and_context_are_the_flags_own() -> None:
    four = _plan("llama-3.1-8b", "llamacpp", "-c 8192 -np 4")
    assert four.command == "llama-server -m MODEL.gguf -c 8192 -np 4"  # as typed, not rebuilt
    one = _plan("llama-3.1-8b", "llamacpp", "-c 8192 -np 1")
    assert four.kv_pool_bytes == one.kv_pool_bytes  # -c is the whole cache, split over the slots
    auto = _plan("llama-3.1-8b", "llamacpp", "-np 2")  # no -c: each slot the model's 131,072
    assert auto.kv_pool_bytes == pytest.approx(2 * 16 * one.kv_pool_bytes, rel=0.01)
    assert (
        _plan("llama-3.1-8b", "llamacpp", "-c 0 -np -1").kv_pool_bytes
        == _plan("llama-3.1-8b", "llamacpp", "").kv_pool_bytes
    )  # llama-server's own words for absent
    assert _plan("llama-3.1-8b", "llamacpp", "-c 8192").kv_pool_bytes == four.kv_pool_bytes  # -np: its auto 4


def test_llama_servers_cache_and_compute_flags_are_planned() -> None:
    window = _plan("gemma-3-27b", "llamacpp", "-c 32768 -np 1")
    full = _plan("gemma-3-27b", "llamacpp", "-c 32768 -np 1 --swa-full")
    assert full.kv_pool_bytes > 2 * window.kv_pool_bytes  # its sliding layers at the whole context
    small, large = _plan("llama-3.1-8b", "llamacpp", "-c 8192"), _plan("llama-3.1-8b", "llamacpp", "-c 8192 -ub 2048")
    assert large.overhead_parts["activation"] > 3 * small.overhead_parts["activation"]
    q8 = _plan("llama-3.1-8b", "llamacpp", "-c 8192 -ctk q8_0 -ctv q8_0")
    assert q8.kv_pool_bytes < 0.6 * small.kv_pool_bytes


@pytest.mark.parametrize(
    ("flags", "said"),
    [("-c 8192 -ngl 10", "partial offload"), ("-c 8192 -ctk q8_0 -ctv f16", "V cache"), ("-c 8192 -nkvo", "-nkvo"),
     ("-c 8192 --mmproj p.gguf", "--mmproj"), ("-c 8192 -ts 3,1", "-ts"), ("-c 8192 --n-cpu-moe 4", "--n-cpu-moe")],
)  # fmt: skip
def test_a_llama_server_flag_the_plan_does_not_model_is_refused(flags: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        _plan("llama-3.1-8b", "llamacpp", flags)


def test_sglang_keeps_one_gpus_share_of_the_kv_and_the_users_command() -> None:
    one = _plan("llama-3.1-70b", "sglang", "--context-length 32768 --mem-fraction-static 0.85 --tp-size 2")
    four = _plan("llama-3.1-70b", "sglang", "--context-length 32768 --mem-fraction-static 0.85 --tp-size 4")
    assert four.capacity.bytes_per_sequence * 2 == pytest.approx(one.capacity.bytes_per_sequence, rel=1e-6)
    assert four.command.endswith("--context-length 32768 --mem-fraction-static 0.85 --tp-size 4")
    assert four.fits and not _plan("llama-3.1-70b", "sglang", "--context-length 32768 --mem-fraction-static 0.85").fits


def test_sglang_refuses_a_context_past_the_models_own() -> None:
    with pytest.raises(UsageError, match="SGLang would refuse that --context-length"):
        _plan("llama-3.1-8b", "sglang", "--context-length 1000000")
