"""vLLM's memory besides weights and KV, modelled after its own profiler (vLLM 0.25, CUDA).

``gpu_worker.determine_available_memory`` gives the KV cache
``util x total - weights - torch peak increase - non-torch increase - CUDA-graph estimate``:

- **torch peak increase**: the profile run, one forward of ``max_num_batched_tokens`` tokens split
  over ``min(max_num_seqs, tokens)`` dummy requests, then the sampler on one row per request. The
  peak is the larger of the sampler (fp32 logits and its sort/top-p copies: ``SAMPLER_COPIES x
  rows x vocab x 4``) and the largest layer's transient buffers (the gated MLP's gate/up and
  activation outputs; the Triton fused-MoE workspaces ``M x topk x (max(I, H) + max(2I, H))`` plus
  its output and a shared expert on its side stream), plus the hidden state and residual carried
  through (``2 x tokens x hidden``), plus what the recurrent prefill kernels keep: one state per
  dummy request, per family.
- **non-torch**: CUDA context growth, NCCL and cuBLAS workspaces: a constant on one GPU.
- **CUDA graphs**: with graphs on, vLLM's V1 model runner captures two graphs of each mode to estimate
  the pool and deducts ``the largest first capture + per graph x (graphs - 1)`` of every mode. Its V2
  runner deducts nothing (its ``profile_cudagraph_memory`` returns 0) and captures the graphs after the KV
  cache is allocated, outside ``gpu_memory_utilization``; which runner a model gets is vLLM's own rule
  (:func:`v2_model_runner`).

Constants are fitted on H200 starts of vLLM 0.25.1 with dummy weights (docs/plan-calibration.md,
``benchmarks/gpu/fit_overhead.py``); the runs kept out of the fit are the check.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.plan.quant import padded_vocab
from servelab.plan.spec import RECURRENT, ModelSpec

GIB = 2**30
MIB = 2**20

NON_TORCH = int(0.22 * GIB)  # every H200 start logged 0.22-0.23 GiB
SAMPLER_COPIES = 1.58  # the sampler's peak in fp32 logits (SmolLM2, Llama-3.1-8B at 2K tokens)
MOE_FIXED = int(0.37 * GIB)  # MoE routing buffers besides the workspaces (Mixtral at 8K tokens)
# Recurrent prefill kernels: bytes per profile-run request per element of one layer's temporal state. The
# kernels keep one state per request (fp32 chunk and final states), so the term follows the dummy batch's
# request count, min(max_num_seqs, max_num_batched_tokens), not its tokens: Nemotron-H's peak barely moved
# from 8,192 to 2,048 batched tokens (1.93 / 1.88 GiB, 1,024 requests both) and Kimi-Linear's fell from
# 30.55 to 2.90 GiB with --max-num-seqs 64.
RECURRENT_PER_ROW_STATE = {"mamba1": 3.68, "mamba2": 0.80, "gdn": 3.39, "kda": 58.9}
MXFP4_EXTRA_PER_TOKEN = 5.2  # triton_kernels' MXFP4 MoE: x topk x 2I x 2 bytes more than the Triton workspaces
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


@dataclass(frozen=True, slots=True)
class EngineShape:
    """The flags that decide the overhead."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024  # vLLM's default on GPUs of 70 GiB or more (256 below)
    enforce_eager: bool = False
    tp: int = 1
    max_cudagraph_capture_size: int | None = None  # None: vLLM's default
    quant: str = "bf16"
    speculative_method: str | None = None  # --speculative-config's method (None: no speculation)
    num_speculative_tokens: int = 0  # --speculative-config's num_speculative_tokens (the decode query is 1 + this)
    parallel_drafting: bool = False  # --speculative-config's parallel_drafting (P-EAGLE: V1)
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # --cudagraph-capture-sizes / -cc.cudagraph_capture_sizes
    optimization_level: int = 2  # -O
    cudagraph_mode: str | None = None  # -cc.cudagraph_mode (None: the -O level's)
    compilation_mode: int | None = None  # -cc.mode (None: VLLM_COMPILE from -O1, none at -O0)
    lora: bool = False  # --enable-lora: graphs captured with and without LoRA
    interactivity: bool = False  # --performance-mode interactivity: sizes 1..32 one by one
    use_v2_model_runner: bool | None = None  # VLLM_USE_V2_MODEL_RUNNER (None: unset)
    estimate_cudagraphs: bool = True  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    torch_compile_disable: bool = False  # TORCH_COMPILE_DISABLE=1: compilation off (so no piecewise graphs)
    v2_blockers: tuple[str, ...] = ()  # flags on that V2 lacks (prompt embeds, raw logits, logits processors, ...)


@dataclass(frozen=True, slots=True)
class Overhead:
    activation: int
    non_torch: int
    cudagraphs: int
    detail: str

    @property
    def total(self) -> int:
        return self.activation + self.non_torch + self.cudagraphs


def default_max_num_seqs(gpu_bytes: int) -> int:
    return 1024 if gpu_bytes >= 70 * GIB else 256


def _moe_inner(spec: ModelSpec) -> int:
    assert spec.moe is not None
    return spec.moe.expert_params // (3 * spec.hidden_size)


def _shared_inner(spec: ModelSpec) -> int:
    assert spec.moe is not None
    shared = spec.moe.shared_params_per_layer - spec.hidden_size * spec.moe.num_experts
    return max(0, shared // (3 * spec.hidden_size))


def forward_peak(spec: ModelSpec, tokens: int, shape: EngineShape) -> tuple[int, str]:
    """The largest layer's transient buffers in the profile run (bf16)."""
    hidden, tp = spec.hidden_size, shape.tp
    dense = 3 * spec.intermediate_size // tp * tokens * 2 if spec.intermediate_size else 0
    moe, what = 0, "MLP"
    if spec.moe:
        inner, topk = _moe_inner(spec) // tp, spec.moe.experts_per_token
        moe = tokens * topk * (max(inner, hidden) + max(2 * inner, hidden)) * 2 + tokens * hidden * 2
        moe += 3 * _shared_inner(spec) // tp * tokens * 2 + MOE_FIXED
        if shape.quant == "mxfp4":
            moe += int(MXFP4_EXTRA_PER_TOKEN * tokens * topk * 2 * inner * 2)
        what = "MoE workspaces"
    return (moe, what) if moe >= dense else (dense, "MLP")


def recurrent_extra(spec: ModelSpec, rows: int, tp: int) -> int:
    extra = 0.0
    for family, k in RECURRENT_PER_ROW_STATE.items():
        layers = [
            layer for layer in spec.layers if layer.kind in RECURRENT and layer.state and layer.state.family == family
        ]
        if layers:
            assert layers[0].state is not None
            extra += k * rows * layers[0].state.elements(tp)[1]
    return int(extra)


def activation_peak(spec: ModelSpec, shape: EngineShape) -> tuple[int, str]:
    tokens = shape.max_num_batched_tokens
    rows = min(shape.max_num_seqs, tokens)
    sampler = int(SAMPLER_COPIES * rows * padded_vocab(spec.vocab_size, shape.tp) // shape.tp * 4)
    forward, what = forward_peak(spec, tokens, shape)
    carried = 2 * tokens * spec.hidden_size * 2
    extra = recurrent_extra(spec, rows, shape.tp)
    top = f"sampler ({rows} rows)" if sampler >= forward else what
    return max(sampler, forward) + carried + extra, f"{top} at {tokens:,} batched tokens"


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


def v2_blockers(spec: ModelSpec, shape: EngineShape) -> list[str]:
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
    return not v2_blockers(spec, shape)


def cudagraph_counts(spec: ModelSpec, shape: EngineShape) -> dict[str, int]:
    """V1's graphs by mode (v1/cudagraph_dispatcher.py): PIECEWISE at every capture size, FULL (decode) at the sizes
    from 1 + k to (1 + k) x max_num_seqs, each once per LoRA case; with speculation and FULL decode graphs the sizes
    are first rounded up to multiples of 1 + k (config/compilation.py, adjust_cudagraph_sizes_for_spec_decode)."""
    mode = cudagraph_mode(shape)
    if mode == "NONE":
        return {}
    sizes = capture_sizes(shape, 1024 if spec.model_type == "gpt_oss" and shape.max_cudagraph_capture_size is None
                          and shape.cudagraph_capture_sizes is None else None)  # fmt: skip
    if not sizes:
        return {}
    query = 1 + shape.num_speculative_tokens
    if query > 1 and mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        top = sizes[-1]
        sizes = sorted({-(-s // query) * query for s in sizes if -(-s // query) * query <= top}) or [query]
    cases = 2 if shape.lora else 1
    counts = {}
    if mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        counts["PIECEWISE"] = len(sizes) * cases
    if mode == "FULL":
        counts["FULL"] = len(sizes) * cases
    if mode in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        counts["FULL"] = len([s for s in sizes if query <= s <= query * shape.max_num_seqs]) * cases
    return {m: n for m, n in counts.items() if n}


def cudagraph_estimate(spec: ModelSpec, shape: EngineShape) -> int:
    """V1's deduction (gpu_model_runner.profile_cudagraph_memory): the largest first capture of the modes captured,
    then each mode's further graphs; none on V2, with graphs off, or with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."""
    if not shape.estimate_cudagraphs or v2_model_runner(spec, shape):
        return 0
    counts = cudagraph_counts(spec, shape)
    if not counts:
        return 0
    modes = {"PIECEWISE": CUDAGRAPH_PIECEWISE, "FULL": CUDAGRAPH_FULL}
    return max(modes[m][0] for m in counts) + sum(modes[m][1] * (n - 1) for m, n in counts.items())


def vllm_overhead(spec: ModelSpec, shape: EngineShape) -> Overhead:
    activation, detail = activation_peak(spec, shape)
    graphs = cudagraph_estimate(spec, shape)
    if graphs:
        detail += f"; CUDA graphs {graphs / GIB:.2f} GiB"
    elif cudagraph_mode(shape) != "NONE" and v2_model_runner(spec, shape):
        detail += (
            "; CUDA graphs captured after the KV cache, outside gpu_memory_utilization (vLLM's V2 model runner; "
            "0.39-0.98 GiB measured for SmolLM2 and Llama-3.1-8B): leave room for them beside co-tenants"
        )
    return Overhead(activation, NON_TORCH, graphs, detail)
