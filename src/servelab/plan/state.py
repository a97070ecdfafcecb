"""The per-sequence state of a recurrent layer, shaped as vLLM 0.25 shapes it.

After ``vllm/model_executor/layers/mamba/mamba_utils.py`` (``MambaStateShapeCalculator`` and
``MambaStateDtypeCalculator``): every recurrent layer keeps a convolution state and a temporal
(SSM / recurrent) state per sequence, one page of the KV pool each.

- Mamba-1 (Jamba): conv ``(kernel-1) x d_inner/tp``, SSM ``d_inner/tp x d_state``.
- Mamba-2 (Nemotron-H, Granite-4.0-H, Falcon-H1): conv ``(kernel-1) x (d_inner + 2 g d_state)/tp``
  with the groups widened to a multiple of tp, SSM ``heads/tp x head_dim x d_state``.
- Gated delta net (Qwen3-Next, Qwen3.5): conv ``(kernel-1) x (2 k_heads dk + v_heads dv)/tp``,
  recurrent ``v_heads/tp x dv x dk``.
- Short convolution (LFM2, ``short_conv_state_shape``): conv ``(L_cache-1) x conv_dim/tp``, no temporal state.
- KDA (Kimi-Linear): conv ``(kernel-1) x (3 heads head_dim)/tp``, recurrent ``heads/tp x head_dim^2``
  always in float32.

Dtypes: the conv state is ``--mamba-cache-dtype`` (auto: the model's dtype); the temporal state
is ``--mamba-ssm-cache-dtype``, whose ``auto`` first becomes the model family's own default
(Nemotron-H: float32 unless its config says otherwise; Qwen3.5: its ``mamba_ssm_dtype``) and
then the conv state's dtype. KDA's recurrent state is float32 whatever is asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servelab.core.errors import UsageError

StateFamily = Literal["mamba1", "mamba2", "gdn", "kda", "shortconv"]

DTYPE_BYTES = {"auto": 0, "float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}


def dtype_bytes(name: str) -> int:
    """Bytes of a ``--mamba-*-cache-dtype`` value; 0 for ``auto``."""
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError:
        raise UsageError(f"unknown state dtype {name!r}", hint="auto, float32, bfloat16 or float16") from None


def _divide(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise UsageError(f"{what} ({value}) is not divisible by the tensor-parallel size {tp}: vLLM refuses it")
    return value // tp


@dataclass(frozen=True, slots=True)
class RecurrentState:
    """Dimensions of one recurrent layer's state; :meth:`elements` and :meth:`nbytes` shape it."""

    family: StateFamily
    conv_kernel: int = 4
    intermediate: int = 0  # Mamba d_inner
    n_groups: int = 0  # Mamba-2
    num_heads: int = 0  # Mamba-2 heads, GDN value heads, KDA heads
    head_dim: int = 0  # Mamba-2 head dim, GDN value head dim, KDA head dim
    state_size: int = 0  # Mamba d_state
    num_k_heads: int = 0  # GDN
    head_k_dim: int = 0  # GDN
    ssm_default: str = "auto"  # what ``auto`` means for this family's temporal state

    def elements(self, tp: int = 1) -> tuple[int, int]:
        """(conv state, temporal state) elements per sequence on one of ``tp`` GPUs."""
        window = self.conv_kernel - 1
        if self.family == "mamba1":
            inner = _divide(self.intermediate, tp, "Mamba d_inner")
            return window * inner, inner * self.state_size
        if self.family == "mamba2":
            groups = self.n_groups if self.n_groups % tp == 0 else tp  # groups replicated to follow the heads
            conv_dim = self.intermediate + 2 * groups * self.state_size
            heads = _divide(self.num_heads, tp, "Mamba-2 heads")
            return window * _divide(conv_dim, tp, "Mamba-2 conv dim"), heads * self.head_dim * self.state_size
        if self.family == "shortconv":
            return window * _divide(self.intermediate, tp, "short-conv dim"), 0
        if self.family == "gdn":
            conv_dim = 2 * self.num_k_heads * self.head_k_dim + self.num_heads * self.head_dim
            heads = _divide(self.num_heads, tp, "value heads")
            return window * _divide(conv_dim, tp, "GDN conv dim"), heads * self.head_dim * self.head_k_dim
        conv_dim = 3 * self.num_heads * self.head_dim
        heads = _divide(self.num_heads, tp, "KDA heads")
        return window * _divide(conv_dim, tp, "KDA conv dim"), heads * self.head_dim * self.head_dim

    def dtype_sizes(self, model_bytes: int, conv_dtype: str = "auto", ssm_dtype: str = "auto") -> tuple[int, int]:
        """Bytes per element of (conv, temporal) state under vLLM's dtype rules."""
        conv = dtype_bytes(conv_dtype) or model_bytes
        if self.family == "kda":
            return conv, 4
        asked = ssm_dtype if ssm_dtype.lower() != "auto" else self.ssm_default
        return conv, dtype_bytes(asked) or conv

    def nbytes(self, model_bytes: int = 2, *, conv_dtype: str = "auto", ssm_dtype: str = "auto", tp: int = 1) -> int:
        conv, temporal = self.elements(tp)
        conv_b, temporal_b = self.dtype_sizes(model_bytes, conv_dtype, ssm_dtype)
        return conv * conv_b + temporal * temporal_b
