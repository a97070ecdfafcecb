"""A speculative draft's memory in the plan, against vLLM 0.25.1's own start of Llama-3.1-8B's geometry with the
EAGLE-3 draft of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on an H100 (dummy weights, docs/sweep.md "Session 28"): the
draft's weights beside the target's (15.58 GiB logged against 15.00 without it) and its layer in the KV cache (the
capacity rule at vLLM's own KV memory exact)."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.plan import compare_with, engine_request, make_plan, read_reported, resolve_model
from servelab.plan.draft import fold_draft, read_draft
from servelab.plan.engine_args import parse_engine_args
from servelab.plan.quant import estimate_weights
from tests.unit.plan.graphs_planned import h100_request

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "benchmarks/gpu/models"
RUN = ROOT / "docs/data/h100-sweep-eagle-2026-12-06-s28"
DRAFT = MODELS / "eagle3-llama3.1-8b"
GIB = 2**30
H, Q, KV, INNER = 4096, 4096, 2 * 8 * 128, 14336
# by hand from llama_eagle3.py: the first layer's q/k/v read 2 x hidden, o, the gated MLP, the fc from three
# auxiliary states, and four norms (input, hidden, post-attention, final)
EAGLE3_PARAMS = 2 * H * (Q + KV) + Q * H + 3 * H * INNER + 3 * H * H + 4 * H


def flags(draft: Path | str, dummy: bool = True) -> str:
    config = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3}
    return (
        "--load-format dummy " if dummy else ""
    ) + f"--max-model-len 32768 --speculative-config '{json.dumps(config)}'"


def test_the_eagle3_drafts_parameters_by_hand() -> None:
    dummy = read_draft("eagle3", str(DRAFT), dummy=True)
    real = read_draft("eagle3", str(DRAFT), dummy=False)
    assert not isinstance(dummy, str | None) and not isinstance(real, str | None)
    assert dummy.params == EAGLE3_PARAMS  # 294M: the head is the target's under dummy weights
    assert real.params == EAGLE3_PARAMS + 32000 * H  # a checkpoint's own head of draft_vocab_size rows
    assert [(layer.kind, layer.num_kv_heads, layer.head_dim) for layer in dummy.layers] == [("full", 8, 128)]


def test_the_eagle3_start_is_planned_as_vllm_logged_it() -> None:
    reported = read_reported(str(RUN / "point-1-engine.log.gz"))
    request = engine_request(h100_request(), flags(DRAFT), reported)
    resolved = resolve_model(str(MODELS / "llama-3.1-8b"))
    plan = make_plan(resolved, request)
    assert reported.weights_bytes and abs(plan.weights.bytes - reported.weights_bytes) < 0.005 * reported.weights_bytes
    beside = compare_with(resolved, request, plan, reported)
    # 33 layers a token: within the log's rounding of its KV memory to 0.01 GiB (~40 tokens); 32 layers gave 453,424
    assert reported.tokens == 439_712 and abs(beside.predicted_tokens_same_pool - reported.tokens) <= 48
    assert any("the draft's 294M parameters" in note for note in plan.notes)
    # the KV cache is 1.5% high: the drafter's own profile (~0.6 GiB) is not modelled
    assert reported.tokens < plan.capacity.tokens < 1.02 * reported.tokens


def test_a_draft_not_readable_here_is_said_and_not_guessed(tmp_path: Path) -> None:
    resolved = resolve_model(str(MODELS / "llama-3.1-8b"))
    request = engine_request(h100_request(), flags(tmp_path / "nowhere"), None)
    plan = make_plan(resolved, request)
    alone = make_plan(resolved, engine_request(h100_request(), "--load-format dummy --max-model-len 32768", None))
    assert plan.capacity.tokens == alone.capacity.tokens and plan.weights.bytes == alone.weights.bytes
    assert any("no readable" in note and "not counted" in note for note in plan.notes)


def test_a_draft_model_counts_every_parameter_and_layer_of_its_own() -> None:
    resolved = resolve_model(str(MODELS / "llama-3.1-8b"))
    small = resolve_model(str(MODELS / "smollm2-135m")).spec
    config = {"method": "draft_model", "model": str(MODELS / "smollm2-135m"), "num_speculative_tokens": 4}
    args = parse_engine_args(f"--max-model-len 8192 --speculative-config '{json.dumps(config)}'")
    folded, note = fold_draft(resolved, "vllm", args)
    assert len(folded.spec.layers) == len(resolved.spec.layers) + len(small.layers)
    assert folded.meta["draft_bytes"] == estimate_weights(small, "bf16").bytes
    request = engine_request(h100_request(), f"--max-model-len 8192 --speculative-config '{json.dumps(config)}'", None)
    alone = make_plan(resolved, engine_request(h100_request(), "--max-model-len 8192", None))
    assert make_plan(resolved, request).weights.bytes == alone.weights.bytes + folded.meta["draft_bytes"]
    assert note and "draft_model" in note


def test_a_quantized_draft_model_is_counted_in_its_own_format() -> None:
    """vLLM quantizes a draft by its own checkpoint (get_draft_quant_config): the block-FP8 Llama as its own draft
    weighs what its FP8 weights do, not twice as much."""
    resolved = resolve_model(str(MODELS / "llama-3.1-8b"))
    fp8 = resolve_model(str(MODELS / "llama-3.1-8b-fp8-block")).spec
    config = {"method": "draft_model", "model": str(MODELS / "llama-3.1-8b-fp8-block"), "num_speculative_tokens": 2}
    folded, _ = fold_draft(resolved, "vllm", parse_engine_args(f"--speculative-config '{json.dumps(config)}'"))
    assert fp8.quantization is not None
    assert folded.meta["draft_bytes"] == estimate_weights(fp8, fp8.quantization).bytes < 0.6 * 16 * 2**30


@pytest.mark.parametrize("given", ["--weights", "checkpoint"])
def test_the_draft_is_added_whatever_the_targets_weights_come_from(given: str) -> None:
    """A preset's known checkpoint size or --weights: the draft is added to them too (it was dropped)."""
    config = {"method": "eagle3", "model": str(DRAFT), "num_speculative_tokens": 3}
    flags = f"--max-model-len 32768 --quantization nvfp4 --speculative-config '{json.dumps(config)}'"
    resolved = resolve_model("laguna-s-2.1")
    base = h100_request("h200")
    if given == "--weights":
        from dataclasses import replace

        base = replace(base, weights_bytes=70 * GIB)
    alone = make_plan(resolved, engine_request(base, flags.split(" --speculative-config")[0], None))
    drafted = make_plan(resolved, engine_request(base, flags, None))
    draft = read_draft("eagle3", str(DRAFT), dummy=False)
    assert not isinstance(draft, str | None)
    assert drafted.weights.bytes == alone.weights.bytes + draft.bytes_per_gpu


def test_the_fc_is_whole_on_each_gpu_and_the_layers_split() -> None:
    one, two = (read_draft("eagle3", str(DRAFT), dummy=True, tp=tp) for tp in (1, 2))
    assert not isinstance(one, str | None) and not isinstance(two, str | None)
    fc = 3 * H * H
    assert one.bytes_per_gpu == 2 * EAGLE3_PARAMS and two.bytes_per_gpu == 2 * ((EAGLE3_PARAMS - fc) // 2 + fc)


@settings(max_examples=25, deadline=None)
@given(times=st.integers(1, 4), dummy=st.booleans())
def test_folding_is_done_once_whatever_the_path(times: int, dummy: bool) -> None:
    """make_plan, compare_with and the speed fit each fold the draft: a target folded already stays as it is."""
    resolved = resolve_model(str(MODELS / "llama-3.1-8b"))
    args = parse_engine_args(flags(DRAFT, dummy))
    once, note = fold_draft(resolved, "vllm", args)
    again = once
    for _ in range(times):
        again, again_note = fold_draft(again, "vllm", args)
        assert again_note == note
    assert again.spec == once.spec and again.weights_bytes == once.weights_bytes


@pytest.mark.parametrize("method", ["ngram", "suffix", None])
def test_methods_without_a_draft_model_add_nothing(method: str | None) -> None:
    assert read_draft(method, str(DRAFT), dummy=False) is None


LEAF = st.none() | st.booleans() | st.integers(-10, 10**9) | st.floats(allow_nan=False) | st.text(max_size=8)
JSON = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
KEYS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
        "num_hidden_layers", "target_hidden_size", "draft_vocab_size", "vocab_size"]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(values=st.dictionaries(st.sampled_from(KEYS), JSON, max_size=len(KEYS)), whole=JSON,
       method=st.sampled_from(["eagle", "eagle3"]), dummy=st.booleans())  # fmt: skip
def test_any_draft_config_is_counted_or_said_never_raised(tmp_path_factory, values, whole, method, dummy) -> None:  # type: ignore[no-untyped-def]
    """A hostile or broken config.json (any JSON, any value under the keys read) is counted with positive sizes or
    said in a note; the plan never raises on it."""
    folder = tmp_path_factory.mktemp("draft")
    for config in (values, whole, {**json.loads((DRAFT / "config.json").read_text()), **values}):
        (folder / "config.json").write_text(json.dumps(config))
        found = read_draft(method, str(folder), dummy)
        if isinstance(found, str):
            assert "not counted" in found
        else:
            assert found is not None and found.params > 0 and 1 <= len(found.layers) <= 1024


def test_a_config_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    """Reading a FIFO would block the plan for ever: only a regular file is read."""
    import os

    os.mkfifo(tmp_path / "config.json")
    found = read_draft("eagle3", str(tmp_path), dummy=True)
    assert isinstance(found, str) and "no readable" in found and "not counted" in found


OTHER_DRAFTS = [
    ("sglang", "--speculative-draft-model-path /x/draft --context-length 8192"),
    ("llamacpp", "-md /x/d.gguf -c 8192"),
    ("llamacpp", "--model-draft /x/d.gguf -c 8192"),
]


@pytest.mark.parametrize(("engine", "flags"), OTHER_DRAFTS)
def test_another_engines_draft_is_said_not_counted(engine: str, flags: str) -> None:
    """SGLang's and llama.cpp's draft flags are not modelled: the plan says the draft is missing, never silently."""
    from dataclasses import replace

    resolved = resolve_model(str(MODELS / "llama-3.1-8b"))
    plan = make_plan(resolved, engine_request(replace(h100_request(), engine=engine), flags, None))
    assert any(f"{engine}'s draft model" in note and "not counted" in note for note in plan.notes)


def test_a_draft_named_by_hub_id_is_read_from_the_local_hf_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM offline finds ``org/name`` in the Hugging Face cache: the plan reads the same config.json there (never a
    download), and a hub id that is not cached is said, not guessed."""
    snapshot = tmp_path / "models--yuhuili--EAGLE3-LLaMA3.1-Instruct-8B" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((DRAFT / "config.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cached = read_draft("eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", dummy=True)
    assert not isinstance(cached, str | None) and cached.params == EAGLE3_PARAMS
    missing = read_draft("eagle3", "yuhuili/not-cached", dummy=True)
    assert isinstance(missing, str) and "local Hugging Face cache" in missing and "not counted" in missing
