"""vLLM's memory besides weights and KV, modelled after its own profiler (vLLM 0.25, CUDA).

``gpu_worker.determine_available_memory`` gives the KV cache
``util x total - weights - torch peak increase - non-torch increase - CUDA-graph estimate``:

- **torch peak increase**: the profile run, one forward of ``max_num_batched_tokens`` tokens split
  over ``min(max_num_seqs, tokens)`` dummy requests, then the sampler on one row per request.
  On the V1 runner (every MoE but three, every hybrid, ngram or draft speculation) the peak is the
  larger of its sampler phase (the fused-MoE workspace it still holds, 14 bytes a logit and the
  top-k/top-p buffer, the last hidden states; with speculation, its rejection sampler's 30 bytes a logit) and the
  forward phase (below), plus a fixed 32 MiB and Kimi's KDA states: one formula for thirteen H100 and H200 starts
  within 0.1 GiB (docs/plan-calibration.md). On V2 (dense models) it is the larger of the sampler (fp32 logits and
  its copies: ``SAMPLER_COPIES x rows x vocab x 4``) and the forward phase: the largest layer's
  transient buffers (the gated MLP's gate/up and activation outputs; the Triton fused-MoE workspaces
  ``M x topk x (max(I, H) + max(2I, H))`` plus its output and a shared expert on its side stream),
  plus the hidden state and residual carried through (``2 x tokens x hidden``).
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

from servelab.plan.cudagraphs import cudagraph_estimate, cudagraph_mode, v2_model_runner
from servelab.plan.engine_shape import EngineShape
from servelab.plan.quant import padded_vocab
from servelab.plan.spec import RECURRENT, ModelSpec

GIB = 2**30
MIB = 2**20

NON_TORCH = int(0.22 * GIB)  # every H200 start logged 0.22-0.23 GiB
SAMPLER_COPIES = 1.58  # the sampler's peak in fp32 logits (SmolLM2, Llama-3.1-8B at 2K tokens)
MOE_FIXED = int(0.34 * GIB)  # MoE routing buffers besides the workspaces (Mixtral at 8K tokens)
# Kimi-Linear's KDA prefill keeps one fp32 state per profile-run request past the sampler's peak: bytes per request
# per element of one layer's state, fitted on its 1,024-request start (30.55 GiB; 2.90 at --max-num-seqs 64, where
# this gives 2.84). The Mamba and gated-delta-net hybrids keep nothing past it: their peaks are V1's sampler phase
# (docs/plan-calibration.md), and a recurrent model never runs on V2.
RECURRENT_PER_ROW_STATE = {"kda": 55.3}
MXFP4_EXTRA_PER_TOKEN = 5.2  # triton_kernels' MXFP4 MoE: x topk x 2I x 2 bytes more than the Triton workspaces
# vLLM's V1 runner (gpu_model_runner.py, _dummy_sampler_run) samples its dummy rows from bf16 logits it keeps, with
# an fp32 copy, softmax probabilities and exponential noise (2 + 3 x 4 bytes a logit), beside the Triton top-k/top-p
# buffer; the fused-MoE workspace (modular_kernel's WorkspaceManager) stays allocated from the first MoE layer on.
V1_BYTES_PER_LOGIT = 14
# With any --speculative-config the same dummy run then drives the rejection sampler over one draft token a row
# (rejection_sampler.py): bf16 logits for the bonus and target rows (2 x 2), the bonus rows' bf16 copy (2) and
# the fp32 logits its sampler returns for logprobs (4), the target rows in fp32 and their clone (8), their softmax
# (4), the exponential noise and its reciprocal (8): 30 bytes a logit of one row a request; fp32 draft probabilities
# (4 more) where the draft is sampled ("probabilistic"). Laguna's geometry with ngram: 1.53 GiB above the
# 14-byte phase in the log, 1.53 GiB here.
V1_SPEC_BYTES_PER_LOGIT = 30
V1_DRAFT_PROBS_BYTES = 4
V1_TOPK_ROWS = 132  # the top-k/top-p buffer: rows rounded up to a power of two, at most 132, x vocab x fp32
V1_FIXED = 32 * MIB  # cuBLAS workspaces and the like, beside the peak


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


def moe_workspace(spec: ModelSpec, tokens: int, shape: EngineShape) -> int:
    """The Triton fused-MoE workspace ``M x topk x (max(I, H) + max(2I, H))`` in bf16 (triton_kernels' MXFP4 MoE
    keeps none)."""
    if spec.moe is None or shape.quant == "mxfp4":
        return 0
    inner, hidden = _moe_inner(spec) // shape.tp, spec.hidden_size
    return tokens * spec.moe.experts_per_token * (max(inner, hidden) + max(2 * inner, hidden)) * 2


def v1_sampler(rows: int, vocab: int, shape: EngineShape | None = None) -> int:
    """V1's dummy sampler run: 14 bytes a logit, and the top-k/top-p buffer (the sort path's below 8 rows); with
    speculation its rejection sampler's phase after it, which always holds more (30 bytes a logit, 34 with sampled
    drafts), beside the same buffer (cached by vLLM across calls)."""
    buffer = min(1 << (rows - 1).bit_length(), V1_TOPK_ROWS) * vocab * 4 if rows >= 8 else rows * vocab * 8
    per_logit = V1_BYTES_PER_LOGIT
    if shape is not None and shape.speculative_method:
        per_logit = V1_SPEC_BYTES_PER_LOGIT + (V1_DRAFT_PROBS_BYTES if shape.draft_probabilistic else 0)
    return rows * vocab * per_logit + buffer


def v1_peak(spec: ModelSpec, shape: EngineShape) -> tuple[int, str]:
    """The V1 runner's profile-run peak: the larger of the sampler phase (the MoE workspace still held, the
    sampler's buffers, the last hidden states and the rows' own) and the forward phase, plus a fixed part and
    Kimi's KDA states."""
    tokens, hidden = shape.max_num_batched_tokens, spec.hidden_size
    rows = min(shape.max_num_seqs, tokens)
    vocab = padded_vocab(spec.vocab_size)  # every rank gathers the whole vocabulary's logits and samples them
    sampler = moe_workspace(spec, tokens, shape) + v1_sampler(rows, vocab, shape)
    sampler += tokens * hidden * 2 + 4 * rows * hidden
    forward, what = forward_peak(spec, tokens, shape)
    forward += 2 * tokens * hidden * 2  # the hidden state and residual carried through
    extra = recurrent_extra(spec, rows, shape.tp)
    sampler_name = "rejection sampler" if shape.speculative_method else "sampler"
    top = f"{sampler_name} ({rows} rows, V1 runner)" if sampler >= forward else what
    return max(sampler, forward) + V1_FIXED + extra, f"{top} at {tokens:,} batched tokens"


def activation_peak(spec: ModelSpec, shape: EngineShape) -> tuple[int, str]:
    if not v2_model_runner(spec, shape):
        return v1_peak(spec, shape)
    tokens = shape.max_num_batched_tokens
    rows = min(shape.max_num_seqs, tokens)
    sampler = int(SAMPLER_COPIES * rows * padded_vocab(spec.vocab_size) * 4)  # the whole vocabulary on each rank
    forward, what = forward_peak(spec, tokens, shape)
    carried = 2 * tokens * spec.hidden_size * 2
    extra = recurrent_extra(spec, rows, shape.tp)
    top = f"sampler ({rows} rows)" if sampler >= forward else what
    return max(sampler, forward) + carried + extra, f"{top} at {tokens:,} batched tokens"


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
