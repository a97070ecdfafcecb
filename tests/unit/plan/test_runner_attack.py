"""Adversarial review of the model-runner rule (plan/cudagraphs.py ``v2_model_runner`` / ``cudagraph_estimate``, the
flags read in plan/vllm_runtime.py) against vLLM 0.25.1's own code. Every test states what vLLM does (file:line in the
0.25.1 wheel) and asserts that; the cases vLLM decides from a draft model's own config.json, which the plan does not
read, are expected failures (xfail, strict).

Sources (vllm-0.25.1 wheel):
- runner choice: vllm/config/vllm.py:518-555 (use_v2_model_runner), :557-575 (_is_default_v2_model_runner_model),
  :2042-2138 (_get_v2_model_runner_unsupported_features), :68 (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES)
- is_moe: vllm/config/model.py:1903 -> transformers_utils/model_arch_config_convertor.py:148 (get_num_experts);
  is_hybrid / is_attention_free: config/model.py:1651-1663 (the model class's IsHybrid / IsAttentionFree)
- deduction: v1/worker/gpu_worker.py:474-517 (only when cudagraph_mode != NONE and
  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), v1/worker/gpu_model_runner.py:6498-6638 (profile_cudagraph_memory:
  max of each mode's first capture + each mode's per-graph x (its graphs - 1)), v1/cudagraph_dispatcher.py:163-231
  (PIECEWISE keys: every capture size x LoRA case; FULL keys: sizes in [1+k, (1+k) x max_num_seqs] x LoRA case)
- capture sizes: config/vllm.py:1669-1833 (_set_cudagraph_sizes: max = min(max_num_seqs x (1+k) x 2, 512), then
  min(max_num_batched_tokens, .), max_num_batched_tokens appended; interactivity mode 1..32),
  config/compilation.py:1425-1513 (V1 with spec decode rounds sizes up to multiples of 1+k),
  model_executor/models/config.py:361-379 (gpt-oss: 1024 unless the user set sizes)
- modes: config/vllm.py:195-276 (-O0: NONE, -O1: PIECEWISE, -O2/-O3: FULL_AND_PIECEWISE), :1095-1101 (eager)
- speculative naming: config/speculative.py:627-860
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.plan import resolve_model
from servelab.plan.cudagraphs import CUDAGRAPH_FULL, CUDAGRAPH_PIECEWISE, cudagraph_estimate
from servelab.plan.engine_args import engine_args_from_log, speculative_method
from servelab.plan.engine_shape import EngineShape
from tests.unit.plan.graphs_planned import graphs_planned

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "benchmarks/gpu/models"
MIB = 2**20


# -- a reference of vLLM 0.25.1's V1 deduction, with servelab's own per-mode constants --------------------------


def vllm_capture_sizes(seqs: int, tokens: int, k: int = 0, *, max_size: int | None = None,
                       sizes: list[int] | None = None, interactivity: bool = False,
                       gpt_oss: bool = False) -> list[int]:  # fmt: skip
    """config/vllm.py:1713-1775 (+ models/config.py:361-379 for gpt-oss)."""
    if gpt_oss and max_size is None and sizes is None:
        max_size = 1024
    top = min(tokens, max_size if max_size is not None else min(seqs * (1 + k) * 2, 512))
    if sizes is not None:
        return sorted({s for s in sizes if s <= tokens})
    out = list(range(1, min(top, 32) + 1)) if interactivity else [s for s in (1, 2, 4) if s <= top]
    if top >= 8:
        out += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        out += list(range(256, top + 1, 16))
    if tokens <= top:
        out.append(tokens)
    return sorted(set(out))


def heads_x_dim(folder: str) -> int:
    """The query heads times head_dim of a folder's attention (a block for each layer with more heads than any
    before it), from its config.json: FlashAttention's split-KV buffers in the first FULL capture
    (v1/attention/backends/flash_attn.py:396-401)."""
    cfg = json.loads((MODELS / folder / "config.json").read_text())
    heads = cfg.get("num_attention_heads_per_layer") or [cfg["num_attention_heads"]]
    records = [h for i, h in enumerate(heads) if h > max(heads[:i], default=0)]
    return sum(records) * int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def vllm_v1_deduction(seqs: int = 1024, tokens: int = 8192, k: int = 0, *, mode: str = "FULL_AND_PIECEWISE",
                      lora: bool = False, heads_dim: int = 32 * 128, **size_kw: object) -> int:  # fmt: skip
    """gpu_model_runner.py:6498-6638 over the dispatcher's keys (cudagraph_dispatcher.py:163-231); ``heads_dim``
    (Mixtral's by default; gpt-oss's sinks take none) sizes the FULL first capture's split-KV buffers."""
    if mode == "NONE":
        return 0
    sizes = vllm_capture_sizes(seqs, tokens, k, **size_kw)  # type: ignore[arg-type]
    q = 1 + k
    if q > 1 and mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "FULL"):  # compilation.py:1425-1436 (V1 only)
        top = sizes[-1]
        sizes = sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= top}) or [q]
    cases = 2 if lora else 1  # dispatcher._get_lora_cases: [0, max_loras + 1] (cudagraph_specialize_lora=True)
    graphs: dict[str, int] = {}
    if mode in ("FULL_AND_PIECEWISE", "PIECEWISE"):
        graphs["piecewise"] = len(sizes) * cases
    if mode == "FULL":
        graphs["full"] = len(sizes) * cases
    if mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
        graphs["full"] = len([s for s in sizes if q <= s <= q * seqs]) * cases
    full_sizes = [s for s in sizes if q <= s <= q * seqs] if mode != "FULL" else sizes
    split = 32 * max(full_sizes, default=0) * (0 if size_kw.get("gpt_oss") else heads_dim) * 4
    first = {"piecewise": CUDAGRAPH_PIECEWISE[0], "full": CUDAGRAPH_FULL[0] + split}
    further = {"piecewise": CUDAGRAPH_PIECEWISE[1], "full": CUDAGRAPH_FULL[1]}
    live = {m: n for m, n in graphs.items() if n}
    return max(first[m] for m in live) + sum(further[m] * (n - 1) for m, n in live.items())


def test_the_reference_matches_servelab_where_both_should_agree() -> None:
    """Sanity: H100 defaults (1,024 seqs, 8,192 tokens): 51 graphs of each mode, gpt-oss 83."""
    assert vllm_v1_deduction() == graphs_planned("mixtral-8x7b", "")
    assert vllm_v1_deduction(gpt_oss=True) == graphs_planned("gpt-oss-20b", "")


# -- (1) the model: is_moe / is_hybrid / is_attention_free -> the runner, every benchmark folder --------------------

# folder -> (vLLM's is_moe, is_hybrid, is_attention_free, runner) by vLLM 0.25.1's rule:
# is_hybrid from the class (IsHybrid in models/<family>.py), is_moe from get_num_experts over the HF config *object*
# (class defaults included: vLLM's own NemotronHConfig defaults n_routed_experts=8, configs/nemotron_h.py:191)
VLLM_RUNNER = {
    "deepseek-v2-lite": (True, False, False, "v2"),  # listed MoE
    "falcon-h1-7b": (False, True, False, "v1"),  # falcon_h1.py: IsHybrid
    "gemma-3-27b-text": (False, False, False, "v2"),
    "gpt-oss-20b": (True, False, False, "v1"),
    "granite-4.0-h-tiny": (True, True, False, "v1"),  # layer_types not all attention (model.py:1658-1663)
    "jamba-mini-1.7": (True, True, False, "v1"),
    "kimi-linear-48b-a3b": (True, True, False, "v1"),
    "laguna-s-2.1-120e": (True, False, False, "v1"),  # num_experts 120, not a listed MoE
    "laguna-s-2.1-dummy": (True, False, False, "v1"),
    "llama-3.1-8b": (False, False, False, "v2"),
    "llama-3.1-8b-fp8-block": (False, False, False, "v2"),
    "llama-4-scout-16l": (True, False, False, "v1"),  # num_local_experts 16 in text_config
    "mixtral-8x7b": (True, False, False, "v1"),
    "mixtral-8x7b-vocab49k": (True, False, False, "v1"),
    "nemotron-nano-9b-v2": (True, True, False, "v1"),  # vLLM: is_moe True by its config's default; servelab: dense
    "qwen3-next-256e-fp8": (True, True, False, "v1"),
    "qwen3-next-80b-a3b-fp8": (True, True, False, "v1"),
    "smollm2-135m": (False, False, False, "v2"),
}


@pytest.mark.parametrize(("folder", "expected"), VLLM_RUNNER.items())
def test_every_benchmark_folder_gets_vllms_runner(folder: str, expected: tuple[bool, bool, bool, str]) -> None:
    runner = expected[3]
    assert (graphs_planned(folder, "") == 0) is (runner == "v2")


def test_servelab_and_vllm_disagree_on_is_moe_for_nemotron_nano_9b_v2_without_runner_consequence() -> None:
    """The NemotronHConfig vLLM reads defaults n_routed_experts=8, so ModelConfig.is_moe is True for the dense
    Nemotron-Nano-9B-v2; servelab's spec has no MoE. Hybrid, so V1
    either way: this only matters if is_moe is ever used for anything else."""
    spec = resolve_model(str(MODELS / "nemotron-nano-9b-v2")).spec
    assert spec.moe is None  # documents the difference; the runner (V1) agrees


def test_a_nemotron_h_pattern_without_mamba_is_still_hybrid_to_vllm() -> None:
    """NemotronHForCausalLM is IsHybrid and its config has no ``layer_types`` (configs/nemotron_h.py:277 names it
    layers_block_type), so model.py:1655-1663 keeps is_hybrid True whatever the pattern: V1. servelab sees no
    recurrent layer and, with no 'E', no MoE: V2, no deduction."""
    config = json.loads((MODELS / "nemotron-nano-9b-v2/config.json").read_text())
    n = config["num_hidden_layers"]
    config["hybrid_override_pattern"] = ("*-" * n)[:n]
    from servelab.plan.config import spec_from_config

    spec = spec_from_config(config)
    assert cudagraph_estimate(spec, EngineShape()) > 0


# -- (2) --speculative-config: the method vLLM ends with, and the runner ---------------------------------------------


@pytest.mark.parametrize(
    ("config", "vllm_method"),
    [
        ({"method": "suffix"}, "suffix"),
        ({"method": "ngram_gpu", "num_speculative_tokens": 4}, "ngram_gpu"),
        ({"method": "mlp_speculator", "model": "ibm-ai-platform/llama3-8b-accelerator"}, "mlp_speculator"),
        ({"method": "medusa", "model": "FasterDecoding/medusa-vicuna-7b-v1.3"}, "medusa"),
        ({"method": "qwen3_next_mtp", "num_speculative_tokens": 2}, "mtp"),
        ({"method": "mtp", "num_speculative_tokens": 1}, "mtp"),
        ({"model": "my_pkg.MyProposer", "num_speculative_tokens": 2}, "custom_class"),
        ({"method": "custom_class", "model": "my_pkg.MyProposer"}, "custom_class"),
        ({"method": "extract_hidden_states", "num_speculative_tokens": 1}, "extract_hidden_states"),
    ],
)
def test_speculative_methods_vllm_names_explicitly(config: dict[str, object], vllm_method: str) -> None:
    """config/speculative.py:636-656: a model with a dot and no slash is a custom class; *_mtp aliases become mtp."""
    assert speculative_method(json.dumps(config)) == vllm_method


@pytest.mark.parametrize(
    ("config", "vllm_method"),
    [
        # speculative.py:638-645: "." in model and "/" not in model -> custom_class, whatever "method" says
        ({"method": "eagle3", "model": "EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}, "custom_class"),
        # speculative.py:835-845: the eagle/eagle3 name test runs for any method but eagle/eagle3/dflash/dspark
        ({"method": "draft_model", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, "eagle3"),
        # speculative.py:853-856: the draft's model_type names medusa / mlp_speculator (no method given)
        pytest.param(
            {"model": "FasterDecoding/medusa-vicuna-7b-v1.3", "num_speculative_tokens": 5},
            "medusa",
            marks=pytest.mark.xfail(
                strict=True, reason="vLLM names it from the draft's config.json, which the plan does not read"
            ),
        ),
        pytest.param(
            {"model": "ibm-ai-platform/llama3-8b-accelerator", "num_speculative_tokens": 4},
            "mlp_speculator",
            marks=pytest.mark.xfail(
                strict=True, reason="vLLM names it from the draft's config.json, which the plan does not read"
            ),
        ),
        # speculative.py:857-860 + hf_config_override (:351-360): a MiMo checkpoint as the draft is MTP -> V2-capable
        pytest.param(
            {"model": "XiaomiMiMo/MiMo-7B-RL", "num_speculative_tokens": 1},
            "mtp",
            marks=pytest.mark.xfail(
                strict=True, reason="vLLM names it from the draft's config.json, which the plan does not read"
            ),
        ),
    ],
)
def test_speculative_methods_vllm_infers(config: dict[str, object], vllm_method: str) -> None:
    assert speculative_method(json.dumps(config)) == vllm_method


@pytest.mark.parametrize("bad", ['{"method": "EAGLE3", "model": "a/b"}', '{"method": "qwen3_moe_mtp"}'])
def test_methods_vllm_refuses_are_refused(bad: str) -> None:
    """SpeculativeMethod is a Literal (speculative.py:64-74): vLLM refuses an upper-case or unknown *_mtp method;
    servelab lower-cases it / maps any *_mtp to mtp and plans a V2 start vLLM never makes."""
    from servelab.core.errors import UsageError

    with pytest.raises(UsageError):
        speculative_method(bad)


@pytest.mark.parametrize("method", ["suffix", "ngram_gpu", "custom_class", "extract_hidden_states"])
def test_non_v2_methods_send_a_dense_model_to_v1(method: str) -> None:
    """config/vllm.py:2066-2077: any method but eagle/eagle3/mtp/dflash/dspark -> V1 (agrees)."""
    model = ', "model": "my_pkg.MyProposer"' if method == "custom_class" else ""
    flags = f"""--speculative-config '{{"method": "{method}", "num_speculative_tokens": 2{model}}}'"""
    assert graphs_planned("llama-3.1-8b", flags) > 0


def test_parallel_drafting_eagle_is_v1() -> None:
    """config/vllm.py:2079-2086: EAGLE with parallel_drafting (P-EAGLE) -> V1."""
    flags = ("""--speculative-config '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", """
             """"num_speculative_tokens": 3, "parallel_drafting": true}'""")  # fmt: skip
    assert graphs_planned("llama-3.1-8b", flags) > 0


def test_dspark_forces_v2_even_for_an_moe() -> None:
    """config/vllm.py:528-533: method dspark returns V2 before the model is looked at."""
    spec = resolve_model(str(MODELS / "mixtral-8x7b")).spec
    assert cudagraph_estimate(spec, EngineShape(speculative_method="dspark")) == 0


@pytest.mark.parametrize(
    "flags",
    [
        """-sc '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'""",  # arg_utils.py:1514
        """--speculative_config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'""",
        "--speculative-config.method ngram --speculative-config.num_speculative_tokens 4",  # argparse_utils.py:387-415
        "--speculative-config.method=ngram --speculative-config.num_speculative_tokens=4",
    ],
)
def test_every_spelling_of_speculative_config_is_read(flags: str) -> None:
    """vLLM accepts -sc, underscores and dotted sub-keys (utils/argparse_utils.py:306-330, 387-415): ngram -> V1."""
    assert graphs_planned("llama-3.1-8b", flags) > 0


def test_a_logs_speculative_config_is_read() -> None:
    """A start-up log prints the argparse value ``'speculative_config': {...}``; servelab's log reader keeps only
    ``speculative_method``, so a dense ngram start is planned on V2."""
    log = ("non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B', 'max_model_len': 8192, 'speculative_config': "
           "{'method': 'ngram', 'num_speculative_tokens': 4, 'prompt_lookup_max': 4}}")  # fmt: skip
    args = engine_args_from_log(log)
    assert args is not None and args.speculative_method == "ngram"


def test_num_speculative_tokens_changes_v1_capture_sizes() -> None:
    """V1, ngram k=4, --max-num-seqs 32: capture max min(32 x 5 x 2, 512) = 320 (config/vllm.py:1723-1726), sizes
    rounded to multiples of 5 (compilation.py:1425-1436), FULL keys 5..160. servelab: max 64, no rounding."""
    flags = ("--max-num-seqs 32 --speculative-config "
             """'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'""")  # fmt: skip
    assert graphs_planned("mixtral-8x7b", flags) == vllm_v1_deduction(seqs=32, k=4)


# -- (3) other flags and environment that change the runner or the deduction -----------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        "--enable-prompt-embeds",  # vllm.py:2110-2111
        "--logprobs-mode raw_logits",  # vllm.py:2113-2118
        "--logprobs-mode processed_logits",
        "--logits-processors my_pkg.MyProcessor",  # vllm.py:2106-2108
        "--kv-sharing-fast-prefill",  # vllm.py:2120-2122
        "-cc.mode=1",  # stock torch.compile, vllm.py:2053-2054 (with FULL graphs asked for, below)
        "VLLM_USE_V2_MODEL_RUNNER=0 vllm serve meta-llama/Llama-3.1-8B",  # vllm.py:520-522
    ],
)
def test_flags_that_send_a_dense_model_to_v1(flags: str) -> None:
    if flags == "-cc.mode=1":
        flags += " -cc.cudagraph_mode=FULL_DECODE_ONLY"  # stock compile drops piecewise graphs (vllm.py:1205-1216)
    assert graphs_planned("llama-3.1-8b", flags) > 0


def test_logprobs_mode_processed_logprobs_keeps_v2() -> None:
    assert graphs_planned("llama-3.1-8b", "--logprobs-mode processed_logprobs") == 0  # agrees


def test_return_routed_experts_sends_a_listed_moe_to_v1() -> None:
    assert graphs_planned("deepseek-v2-lite", "--enable-return-routed-experts") > 0  # vllm.py:2101-2103


def test_vllm_use_v2_model_runner_1_moves_an_moe_to_v2() -> None:
    assert graphs_planned("mixtral-8x7b", "VLLM_USE_V2_MODEL_RUNNER=1 vllm serve mistralai/Mixtral-8x7B-v0.1") == 0


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("-O0", 0),  # vllm.py:195-213: cudagraph_mode NONE -> gpu_worker.py:478-483 skips the estimate
        ("-O 0", 0),
        ("--optimization-level 0", 0),
        ("--enforce_eager", 0),  # underscores are dashes to vLLM (argparse_utils.py:312-320)
        ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 vllm serve m", 0),  # gpu_worker.py:496-500
        ("TORCH_COMPILE_DISABLE=1 vllm serve m", 0),  # vllm.py:1103-1108 then 1204-1216: piecewise needs compile
        ("-cc.cudagraph_mode=NONE", 0),
        ("""--compilation-config '{"cudagraph_mode": "NONE"}'""", 0),
        ("-O1", vllm_v1_deduction(mode="PIECEWISE")),
        ("-cc.cudagraph_mode=PIECEWISE", vllm_v1_deduction(mode="PIECEWISE")),
        ("-cc.cudagraph_mode=FULL_DECODE_ONLY", vllm_v1_deduction(mode="FULL_DECODE_ONLY")),
        (
            """--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}'""",
            vllm_v1_deduction(mode="FULL_DECODE_ONLY"),
        ),
        ("--max-cudagraph-capture-size 64", vllm_v1_deduction(max_size=64)),
        ("-cc.max_cudagraph_capture_size=64", vllm_v1_deduction(max_size=64)),
        ("--cudagraph-capture-sizes 1 2 4 8", vllm_v1_deduction(sizes=[1, 2, 4, 8])),
        ("""--compilation-config '{"cudagraph_capture_sizes": [1, 2, 4, 8]}'""", vllm_v1_deduction(sizes=[1, 2, 4, 8])),
        ("--enable-lora", vllm_v1_deduction(lora=True)),  # dispatcher: [0, max_loras + 1] cases per size
        ("--enable-lora --max-loras 4", vllm_v1_deduction(lora=True)),
        ("--performance-mode interactivity", vllm_v1_deduction(interactivity=True)),  # vllm.py:1749-1753
    ],
)
def test_flags_that_change_the_v1_deduction(flags: str, expected: int) -> None:
    assert graphs_planned("mixtral-8x7b", flags) == expected


# -- (4) the V1 formula against profile_cudagraph_memory ---------------------------------------------------------------


@pytest.mark.parametrize("seqs", [4, 16, 64, 200])
def test_full_graphs_stop_at_max_num_seqs(seqs: int) -> None:
    """cudagraph_dispatcher.py:211-231: FULL (decode) keys only up to (1+k) x max_num_seqs; PIECEWISE keys take every
    size. servelab counts every size for both modes."""
    assert graphs_planned("mixtral-8x7b", f"--max-num-seqs {seqs}") == vllm_v1_deduction(seqs=seqs)


def test_gpt_oss_keeps_1024_with_few_seqs_but_full_graphs_stop_at_seqs() -> None:
    assert graphs_planned("gpt-oss-20b", "--max-num-seqs 64") == vllm_v1_deduction(seqs=64, gpt_oss=True)


@pytest.mark.parametrize(("folder", "tokens"), [("mixtral-8x7b", 256), ("mixtral-8x7b", 300), ("gpt-oss-20b", 512)])
def test_capture_sizes_stop_at_max_num_batched_tokens(folder: str, tokens: int) -> None:
    """config/vllm.py:1727-1773: max capture size = min(max_num_batched_tokens, .), that budget appended."""
    expected = vllm_v1_deduction(tokens=tokens, gpt_oss=folder == "gpt-oss-20b")
    assert graphs_planned(folder, f"--max-num-batched-tokens {tokens}") == expected


@pytest.mark.parametrize("folder", ["nemotron-nano-9b-v2", "qwen3-next-256e-fp8", "granite-4.0-h-tiny"])
def test_hybrids_with_few_seqs(folder: str) -> None:
    """Hybrids default to FULL_AND_PIECEWISE too (models/config.py:545-604; mamba/GDN backends UNIFORM_BATCH), so the
    same FULL-count rule applies."""
    assert graphs_planned(folder, "--max-num-seqs 8") == vllm_v1_deduction(seqs=8, heads_dim=heads_x_dim(folder))
