"""vLLM 0.25.1's CUDA graphs as its profiler counts them: which model runner a model gets and, on V1, the
estimate it deducts from the KV cache.

- **The runner** (config/vllm.py, ``use_v2_model_runner``): V2 for a model neither hybrid nor attention-free that is
  dense or one of three MoE architectures, unless a feature V2 lacks is on. V2's profile deducts nothing (its
  ``profile_cudagraph_memory`` returns 0): it captures the graphs after the KV cache, outside
  ``gpu_memory_utilization``.
- **V1's deduction** (gpu_model_runner.py, ``profile_cudagraph_memory``): two graphs of each mode captured, the
  largest first capture of the modes plus each mode's further graphs at its second's cost; the modes and capture
  sizes are vLLM's for the flags (-O level, -cc, capture sizes, speculation, LoRA). The first FULL capture holds
  FlashAttention's split-KV buffers (``split_kv_workspace``); the other per-mode figures are constants measured on
  gpt-oss-20b and Nemotron-Nano-9B-v2, and an FP8 MoE's per-graph figures are larger than they say
  (docs/plan-calibration.md).
"""

from __future__ import annotations

from servelab.plan.engine_shape import EngineShape
from servelab.plan.spec import RECURRENT, ModelSpec

MIB = 2**20

# CUDA-graph pool estimate per mode: (first capture, per further graph); gpt-oss-20b on the H200
CUDAGRAPH_PIECEWISE = (180 * MIB, 4 * MIB)
CUDAGRAPH_FULL = (2 * MIB, 1 * MIB)
# vLLM 0.25.1's runner choice (config/vllm.py, use_v2_model_runner): V2 for a model neither hybrid nor
# attention-free that is dense or one of these MoE architectures, unless a feature V2 lacks is on; of those the
# plan reads speculative decoding by a method other than these, P-EAGLE's parallel drafting, and the flags in
# EngineShape.v2_blockers. VLLM_USE_V2_MODEL_RUNNER decides outright; the dspark method forces V2.
V2_RUNNER_MOE = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})
V2_SPECULATORS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
# families whose vLLM class is IsHybrid and whose HF config names no layer "attention" (transformers 5: Nemotron-H's
# layer_types say "full_attention"), so config/model.py's is_hybrid holds whatever the layer pattern; Granite-4.0's
# hybrid class with every layer "attention" (granite-4.0-micro) is the one vLLM does not count as hybrid
HYBRID_CLASS_TYPES = frozenset({"jamba", "nemotron_h", "falcon_h1", "kimi_linear", "lfm2", "qwen3_next"})
# -O levels' CUDA-graph mode (config/vllm.py, OPTIMIZATION_LEVEL_0x); vLLM's default level is 2
OPT_LEVEL_CUDAGRAPH_MODE = {0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}
VLLM_COMPILE = 3  # CompilationMode.VLLM_COMPILE; piecewise graphs need it
FA_SPLITS = 32  # AttentionConfig.flash_attn_max_num_splits_for_cuda_graph
ATTENTION = ("full", "sliding", "chunked")


def capture_sizes(shape: EngineShape, default_max: int | None = None) -> list[int]:
    """vLLM's CUDA-graph capture sizes (config/vllm.py, _set_cudagraph_sizes): the user's list, else 1, 2, 4, steps of
    8 to 256, then of 16, up to ``min(max_num_seqs x (1 + k) x 2, 512)`` (``default_max``: a model's own, gpt-oss
    1,024, where the user set no size); never past max_num_batched_tokens, which is added when it fits."""
    tokens, query = shape.max_num_batched_tokens, 1 + shape.num_speculative_tokens
    if shape.cudagraph_capture_sizes is not None:
        return sorted({s for s in shape.cudagraph_capture_sizes if s <= tokens})
    top = shape.max_cudagraph_capture_size
    if top is None:
        top = default_max or min(shape.max_num_seqs * query * 2, 512)
    top = min(tokens, top)
    sizes = list(range(1, min(top, 32) + 1)) if shape.interactivity else [s for s in (1, 2, 4) if s <= top]
    sizes += [*range(8, min(top + 1, 256), 8), *range(256, top + 1, 16)]
    if tokens <= top:
        sizes.append(tokens)
    return sorted(set(sizes))


def cudagraph_mode(shape: EngineShape) -> str:
    """The CUDA-graph mode vLLM ends with: none when eager; the user's, else the -O level's; piecewise graphs need
    vLLM's own compilation (a -cc.mode other than 3, -O0 or TORCH_COMPILE_DISABLE=1 turn them, and a mode with
    them, off)."""
    if shape.enforce_eager:
        return "NONE"
    mode = (
        shape.cudagraph_mode or OPT_LEVEL_CUDAGRAPH_MODE.get(shape.optimization_level, "FULL_AND_PIECEWISE")
    ).upper()
    compiled = shape.compilation_mode
    if compiled is None:
        compiled = VLLM_COMPILE if shape.optimization_level > 0 else 0
    if shape.torch_compile_disable:
        compiled = 0
    if "PIECEWISE" in mode and compiled != VLLM_COMPILE:
        return "NONE"
    return mode


def v2_blockers(shape: EngineShape) -> list[str]:
    """The features on that vLLM's V2 runner lacks (config/vllm.py, _get_v2_model_runner_unsupported_features)."""
    out = list(shape.v2_blockers)
    if shape.compilation_mode == 1:
        out.append("stock torch.compile")
    method = shape.speculative_method
    if method is not None:
        if method not in V2_SPECULATORS:
            out.append(f"speculative method {method!r}")
        if shape.parallel_drafting and method not in ("dflash", "dspark"):
            out.append("parallel drafting")
    return out


def v2_model_runner(spec: ModelSpec, shape: EngineShape) -> bool:
    """Whether vLLM runs this model on its V2 model runner (no CUDA-graph deduction)."""
    if shape.use_v2_model_runner is not None:
        return shape.use_v2_model_runner
    if shape.speculative_method == "dspark":
        return True  # only V2 implements it
    if spec.model_type in HYBRID_CLASS_TYPES or any(layer.kind in RECURRENT for layer in spec.layers):
        return False  # hybrid, or attention-free
    if spec.moe is not None and spec.architecture not in V2_RUNNER_MOE:
        return False
    return not v2_blockers(shape)


def _graph_sizes(spec: ModelSpec, shape: EngineShape) -> tuple[str, list[int], int]:
    """The mode, V1's capture sizes (rounded to multiples of 1 + k with speculation and FULL decode graphs:
    config/compilation.py, adjust_cudagraph_sizes_for_spec_decode) and the query length 1 + k."""
    mode = cudagraph_mode(shape)
    if mode == "NONE":
        return mode, [], 1
    sizes = capture_sizes(shape, 1024 if spec.model_type == "gpt_oss" and shape.max_cudagraph_capture_size is None
                          and shape.cudagraph_capture_sizes is None else None)  # fmt: skip
    query = 1 + shape.num_speculative_tokens
    if sizes and query > 1 and mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        top = sizes[-1]
        rounded = {-(-s // query) * query for s in sizes}
        sizes = sorted(s for s in rounded if s <= top) or [query]
    return mode, sizes, query


def _full_sizes(mode: str, sizes: list[int], query: int, shape: EngineShape) -> list[int]:
    if mode == "FULL":
        return sizes
    if mode in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        return [s for s in sizes if query <= s <= query * shape.max_num_seqs]
    return []


def cudagraph_counts(spec: ModelSpec, shape: EngineShape) -> dict[str, int]:
    """V1's graphs by mode (v1/cudagraph_dispatcher.py): PIECEWISE at every capture size, FULL (decode) at the sizes
    from 1 + k to (1 + k) x max_num_seqs, each once per LoRA case."""
    mode, sizes, query = _graph_sizes(spec, shape)
    cases = 2 if shape.lora else 1
    counts = {"FULL": len(_full_sizes(mode, sizes, query, shape)) * cases}
    if mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        counts["PIECEWISE"] = len(sizes) * cases
    return {m: n for m, n in counts.items() if n}


def split_kv_workspace(spec: ModelSpec, shape: EngineShape) -> int:
    """What FlashAttention's split-KV buffers add to the first FULL capture (v1/attention/backends/flash_attn.py: a
    FULL graph passes ``flash_attn_max_num_splits_for_cuda_graph``, 32, so fp32 partial outputs of [32, heads,
    tokens, head_dim] are allocated at the largest FULL size: a block for the first layer's heads, and a new one
    for each layer with more heads than any before it, a freed larger block serving the smaller ones). Not for
    attention with sinks (gpt-oss: 2 MiB measured) nor MLA, whose backends are others."""
    if spec.model_type == "gpt_oss" or any(layer.kind == "mla" for layer in spec.layers):
        return 0
    mode, sizes, query = _graph_sizes(spec, shape)
    full = _full_sizes(mode, sizes, query, shape)
    head_dim = max((layer.head_dim for layer in spec.layers if layer.kind in ATTENTION), default=0)
    if not full or not head_dim:
        return 0
    heads = sum(max(1, h // shape.tp) for h in spec.attention_q_heads)
    return FA_SPLITS * max(full) * heads * head_dim * 4


def cudagraph_estimate(spec: ModelSpec, shape: EngineShape) -> int:
    """V1's deduction (gpu_model_runner.profile_cudagraph_memory): the largest first capture of the modes captured,
    then each mode's further graphs; none on V2, with graphs off, or with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."""
    if not shape.estimate_cudagraphs or v2_model_runner(spec, shape):
        return 0
    counts = cudagraph_counts(spec, shape)
    if not counts:
        return 0
    first = {"PIECEWISE": CUDAGRAPH_PIECEWISE[0], "FULL": CUDAGRAPH_FULL[0] + split_kv_workspace(spec, shape)}
    further = {"PIECEWISE": CUDAGRAPH_PIECEWISE[1], "FULL": CUDAGRAPH_FULL[1]}
    return max(first[m] for m in counts) + sum(further[m] * (n - 1) for m, n in counts.items())
