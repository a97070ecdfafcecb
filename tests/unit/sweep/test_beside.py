"""The plan for exactly a point's flags, checked against what the engines logged on this machine (docs/sweep.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.sweep import Point, Where, launch_for, plan_point


@pytest.mark.parametrize(
    ("flags", "logged"),
    [
        (("-np", "1"), 8192),  # no -c: the model's 8,192 a slot
        (("-np", "2"), 16384),  # llama-server 0.3.36 logged n_ctx = 16384: each slot the model's whole context
        (("-c", "4096", "-np", "2"), 4096),  # -c given: split over the slots
    ],
)
def test_llamacpp_points_planned_as_llama_server_logged(flags: tuple[str, ...], logged: int) -> None:
    launch = launch_for("llamacpp", Point(flags), None, Path("model.gguf"))
    plan = plan_point("llamacpp", "smollm2-135m", launch.args, launch.env, Where())
    assert plan.error is None and plan.kv_tokens == logged


def test_the_embedded_vllm_point_is_planned_with_its_own_settings_and_the_points_flags(model_folder: Path) -> None:
    """vLLM CPU 0.32 logged 'CPU KV cache size: 93,184 tokens' for the embedded settings (2 GiB, 8,192 context)."""
    launch = launch_for("vllm", Point(("--max-num-batched-tokens", "512")), None, model_folder)
    assert launch.args == ("--max-model-len", "8192", "--dtype", "bfloat16", "--max-num-batched-tokens", "512")
    assert launch.env == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    plan = plan_point("vllm", str(model_folder), launch.args, launch.env, Where())
    assert plan.error is None and plan.kv_tokens == 93184 and plan.context == 8192


def test_a_points_own_setting_replaces_the_embedded_one(model_folder: Path) -> None:
    launch = launch_for("vllm", Point(("--max-model-len=4096",), (("VLLM_CPU_KVCACHE_SPACE", "1"),)), None,
                        model_folder)  # fmt: skip
    assert launch.args == ("--dtype", "bfloat16", "--max-model-len=4096")
    assert launch.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    plan = plan_point("vllm", str(model_folder), launch.args, launch.env, Where())
    assert plan.context == 4096 and plan.kv_tokens is not None and plan.kv_tokens < 93184


def test_a_model_the_plan_cannot_read_is_said_not_raised() -> None:
    plan = plan_point("vllm", "no-such-model-anywhere", ("--max-num-seqs", "4"), {}, Where())
    assert plan.kv_tokens is None and plan.error and "no-such-model-anywhere" in plan.error


def test_a_user_model_starts_with_the_points_flags_alone(tmp_path: Path) -> None:
    launch = launch_for("vllm", Point(("--max-num-seqs", "4")), str(tmp_path), None)
    assert launch.args == ("--max-num-seqs", "4") and launch.env == {}
    words = launch.command("127.0.0.1", 18870)
    assert words[-2:] == ["--max-num-seqs", "4"] and str(tmp_path) in words
