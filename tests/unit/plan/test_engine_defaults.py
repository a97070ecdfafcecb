"""`plan --engine-args` plans exactly the flags given: every flag left out takes vLLM's default for the card
(vLLM 0.25.1: 1,024 sequences and 8,192 batched tokens on a card of 70 GiB or more that is not an A100, else 256
and 2,048; utilisation 0.92; the model's own context), nothing of servelab's is added to the command unless
--suggest asks, and the output names the values that were defaults."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.cli import main
from servelab.core.errors import UsageError
from servelab.plan import PlanRequest, gpu, make_plan, parse_engine_args, read_reported, resolve_model
from servelab.plan.request import with_engine_args

ROOT = Path(__file__).resolve().parents[3]
KIMI = ROOT / "benchmarks/gpu/models/kimi-linear-48b-a3b"
KIMI_LOG = ROOT / "docs/data/h200-capacity-2026-12-01/kimi-e8k.log.gz"
# the table read in vLLM's get_batch_defaults, written out by hand: (max_num_seqs, max_num_batched_tokens)
EXPECTED = {"h100-80gb": (1024, 8192), "h200": (1024, 8192), "rtx-pro-6000": (1024, 8192),
            "a100-80gb": (256, 2048), "rtx-4090": (256, 2048), "l40s": (256, 2048)}  # fmt: skip
FLAGS = {
    "--max-num-seqs": st.sampled_from([1, 3, 64, 512]),
    "--max-num-batched-tokens": st.sampled_from([512, 2048, 4096]),
    "--gpu-memory-utilization": st.sampled_from([0.5, 0.8, 0.95]),
    "--max-model-len": st.sampled_from([4096, 32768]),
}


def _request(card: str, context: int = 0) -> PlanRequest:
    g = gpu(card)
    return PlanRequest(gpu_name=g.key, gpu_bytes=g.memory_bytes, bandwidth_gbs=g.bandwidth_gbs, context=context,
                       concurrency=1, quant=None, kv_dtype="auto", cuda_total_bytes=g.cuda_total_bytes)  # fmt: skip


def _plan(model: str, card: str, flags: str):  # type: ignore[no-untyped-def]
    return make_plan(resolve_model(model), with_engine_args(_request(card), parse_engine_args(flags)))


@settings(max_examples=40, deadline=None)
@given(card=st.sampled_from(sorted(EXPECTED)), picked=st.fixed_dictionaries({}, optional=FLAGS))
def test_every_flag_left_out_takes_vllms_default_for_the_card(card: str, picked: dict[str, float]) -> None:
    """The plan of some flags is the plan of all four, the missing ones written at vLLM's default."""
    seqs, tokens = EXPECTED[card]
    typed = " ".join(f"{flag} {value}" for flag, value in picked.items())
    context = int(picked.get("--max-model-len", 131072))  # llama-3.1-8b's own maximum
    given_seqs = int(picked.get("--max-num-seqs", 0))
    default_tokens = min((given_seqs or seqs) * context, tokens)  # vLLM caps a default budget at seqs x context
    given_tokens = int(picked.get("--max-num-batched-tokens", 0))
    full = {"--max-num-seqs": given_seqs or min(seqs, given_tokens or default_tokens),
            "--max-num-batched-tokens": given_tokens or default_tokens,
            "--gpu-memory-utilization": picked.get("--gpu-memory-utilization", 0.92),
            "--max-model-len": context}  # fmt: skip
    explicit = " ".join(f"{flag} {value}" for flag, value in full.items())
    mine, theirs = _plan("llama-3.1-8b", card, typed), _plan("llama-3.1-8b", card, explicit)
    assert (mine.capacity, mine.overhead_bytes, mine.util_chosen) == (theirs.capacity, theirs.overhead_bytes,
                                                                      theirs.util_chosen)  # fmt: skip
    assert shlex.split(mine.command)[3:] == shlex.split(typed)  # vllm serve MODEL, then the flags as typed
    named = {f"--{name.replace('_', '-')}" for name in mine.defaults if name != "why"}
    assert named == set(FLAGS) - set(picked)  # the output names exactly the values that were defaults


def test_a_hybrid_whose_profile_peak_grows_with_the_sequence_count_is_planned_with_the_users_flags() -> None:
    """Kimi-Linear: its KDA prefill keeps a state per profile-run request, so max_num_seqs moves the KV pool.
    Planned with --concurrency's default of 1 written in as --max-num-seqs 1, the plan was of another command
    (3.9M tokens); with vLLM's own 1,024 it lands where vLLM, run with these flags, logged its pool."""
    reported = read_reported(str(KIMI_LOG))
    flags = "--max-model-len 32768 --enforce-eager"
    plan = _plan(str(KIMI), "h200", flags)
    assert "--max-num-seqs" not in plan.command and plan.defaults["max_num_seqs"] == 1024
    assert reported.tokens and abs(plan.capacity.tokens - reported.tokens) / reported.tokens < 0.01
    at_default = parse_engine_args(f"{flags} --gpu-memory-utilization 0.92")  # the old plan, same utilisation
    suggested = make_plan(resolve_model(str(KIMI)), with_engine_args(_request("h200"), at_default, suggest=True))
    assert "--max-num-seqs 1" in suggested.command and suggested.capacity.tokens > 4 * reported.tokens


def test_concurrency_is_checked_against_the_engine_and_written_only_with_suggest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--concurrency", "4", "--engine-args",
            "--max-model-len 8192 --max-num-seqs 2", "--json"]  # fmt: skip
    assert main(args) == 3
    data = json.loads(capsys.readouterr().out)
    assert any("at most 2 sequences" in reason for reason in data["reasons"])
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--concurrency", "4", "--engine-args",
                 "--max-model-len 8192", "--json"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert "--max-num-seqs" not in data["command"] and "--gpu-memory-utilization" not in data["command"]
    assert data["util_chosen"] == 0.92 and data["defaults"]["max_num_seqs"] == 1024
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--concurrency", "4", "--engine-args",
                 "--max-model-len 8192", "--suggest", "--json"]) == 0  # fmt: skip
    command = json.loads(capsys.readouterr().out)["command"]
    assert "--max-num-seqs 4" in command and "--gpu-memory-utilization" in command


def test_a_servelab_option_beside_the_flags_is_refused_unless_suggested(capsys: pytest.CaptureFixture[str]) -> None:
    """--context beside --engine-args would plan a context vLLM never sees: said, with the flag to add."""
    base = ["plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--engine-args", "--enforce-eager"]
    assert main([*base, "--context", "64k"]) == 2
    err = capsys.readouterr().err
    assert "--context" in err and "--max-model-len" in err
    assert main([*base, "--context", "64k", "--suggest", "--json"]) == 0
    assert "--max-model-len 65536" in json.loads(capsys.readouterr().out)["command"]


def test_without_engine_args_the_token_budget_follows_the_card() -> None:
    """servelab's own command leaves --max-num-batched-tokens out, so the plan takes vLLM's budget for the card
    (2,048 on a 4090) and writes a budget into the command only when it is not that."""
    resolved = resolve_model("llama-3.1-8b")
    small = make_plan(resolved, replace(_request("rtx-4090", 8192), defaulted=("max_num_batched_tokens",)))
    assert small.defaults["max_num_batched_tokens"] == 2048 and "--max-num-batched-tokens" not in small.command
    fixed = make_plan(resolved, _request("rtx-4090", 8192))  # a caller's 8,192: planned and written
    assert "--max-num-batched-tokens 8192" in fixed.command and fixed.overhead_bytes > small.overhead_bytes


def test_the_side_check_names_the_flag() -> None:
    from servelab.plan import check_side_options

    with pytest.raises(UsageError, match="--tp") as caught:
        check_side_options(["--tp"], suggest=False)
    assert "--tensor-parallel-size" in str(caught.value.hint)
    check_side_options(["--tp"], suggest=True)
