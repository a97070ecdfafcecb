"""vLLM's KV-cache capacity rules, after vllm/v1/kv_cache_interface.py and v1/core/kv_cache_utils.py.

- Each layer gets a spec: full attention and MLA pages hold ``block_size`` tokens; sliding layers
  the same page, but a request holds at most ``window - 1 + max_num_batched_tokens`` tokens of it
  (+1 block, as the window may start mid-block); recurrent (mamba / gated delta net) layers hold one
  page per request, their whole state.
- Hybrid attention + recurrent models: the attention block size grows (in steps of the kernel
  alignment) until one attention page is at least the state page, and the state page is padded
  to it, so all pages have one size.
- Layers are grouped by spec; every group has ``group_size`` layers (the smallest type count, or
  the largest when it is under 1.5x the smallest). All groups share one block pool, and a block
  spans one page of every layer in a group: ``bytes_per_block = group_size * page``.
- ``num_blocks = available // bytes_per_block``; a request at ``max_model_len`` needs the sum over
  groups of its blocks; capacity in tokens = ``int(num_blocks / blocks_per_request * max_model_len)``,
  which is the figure vLLM logs as "KV cache size: N tokens".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from servelab.plan.spec import RECURRENT, CacheLayer, ModelSpec


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


MambaCacheMode = Literal["none", "align", "all"]


@dataclass(frozen=True, slots=True)
class VllmOptions:
    max_model_len: int
    kv_dtype_bytes: float = 2.0
    model_dtype_bytes: int = 2
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    attention_block_alignment: int = 16  # kernel block-size granularity (FlashAttention: 16)
    tp: int = 1
    mamba_cache_dtype: str = "auto"  # --mamba-cache-dtype (the conv state)
    mamba_ssm_cache_dtype: str = "auto"  # --mamba-ssm-cache-dtype (the temporal state)
    mamba_cache_mode: MambaCacheMode = "none"  # "align"/"all" with --enable-prefix-caching on a hybrid
    hybrid_kv_cache_manager: bool | None = None  # None: vLLM's default (on)

    def state_bytes(self, layer: CacheLayer) -> int:
        return layer.state_bytes(
            self.model_dtype_bytes, conv_dtype=self.mamba_cache_dtype, ssm_dtype=self.mamba_ssm_cache_dtype, tp=self.tp
        )


@dataclass(frozen=True, slots=True)
class CacheGroup:
    kind: str  # "full", "sliding", "mla", "linear"
    layers: int
    page_bytes: int
    block_size: int
    blocks_per_request: int


@dataclass(frozen=True, slots=True)
class VllmLayout:
    groups: tuple[CacheGroup, ...]
    bytes_per_block: int
    blocks_per_request: int
    max_model_len: int

    def num_blocks(self, available_bytes: int) -> int:
        return max(0, available_bytes // self.bytes_per_block)

    def max_concurrency(self, available_bytes: int) -> float:
        return self.num_blocks(available_bytes) / self.blocks_per_request

    def capacity_tokens(self, available_bytes: int) -> int:
        """What vLLM logs as "KV cache size: N tokens"."""
        return int(self.max_concurrency(available_bytes) * self.max_model_len)


def _attention_page(layer: CacheLayer, opts: VllmOptions, block: int) -> int:
    return int(block * layer.kv_bytes_per_token(opts.kv_dtype_bytes, opts.tp))


def _attention_block_size(spec: ModelSpec, opts: VllmOptions) -> int:
    """The block size after hybrid alignment (vLLM's ``update_block_size_for_backend``): an attention
    page must hold a recurrent state page; with Mamba prefix caching ('all') also a whole number of
    the Mamba chunk."""
    states = [opts.state_bytes(layer) for layer in spec.layers if layer.kind in RECURRENT]
    attn = [layer for layer in spec.layers if layer.kind not in RECURRENT]
    if not states or not attn or not max(states):
        return opts.block_size
    per_token = max(layer.kv_bytes_per_token(opts.kv_dtype_bytes, opts.tp) for layer in attn)
    step = max(opts.attention_block_alignment, opts.block_size)
    if opts.mamba_cache_mode == "all":
        chunk = math.lcm(spec.mamba_chunk_size or 2048, step)
        needed = chunk * cdiv(cdiv(max(states), int(per_token)), chunk)
    else:
        needed = step * math.ceil(max(states) / (per_token * step))
    return max(opts.block_size, needed)


def hybrid_manager_on(opts: VllmOptions) -> bool:
    """vLLM 0.25 keeps its hybrid KV-cache manager on by default, chunked local attention included
    (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1); with
    --disable-hybrid-kv-cache-manager (or that variable at 0) every attention layer is a full one."""
    return opts.hybrid_kv_cache_manager is not False


def _kind(layer: CacheLayer, hybrid: bool) -> str:
    return layer.kind if hybrid or layer.kind not in ("sliding", "chunked") else "full"


def _blocks_per_request(layer: CacheLayer, kind: str, opts: VllmOptions, block: int) -> int:
    if kind in RECURRENT:
        return {"none": 1, "align": 2, "all": cdiv(opts.max_model_len, block)}[opts.mamba_cache_mode]
    if kind == "sliding" and layer.window:
        tokens = min(layer.window - 1 + opts.max_num_batched_tokens, opts.max_model_len)
        return cdiv(tokens, block) + 1
    if kind == "chunked" and layer.window:
        return cdiv(min(layer.window + opts.max_num_batched_tokens, opts.max_model_len), block)
    return cdiv(opts.max_model_len, block)


def _group_size(counts: list[int]) -> int:
    smallest, largest = min(counts), max(counts)
    return largest if largest < smallest * 1.5 else smallest


def vllm_layout(spec: ModelSpec, opts: VllmOptions) -> VllmLayout:
    block = _attention_block_size(spec, opts)
    hybrid = hybrid_manager_on(opts)
    pages: dict[tuple[str, int | None], tuple[int, int, int]] = {}  # key -> (count, page, blocks/request)
    for layer in spec.layers:
        kind = _kind(layer, hybrid)
        key = (kind, layer.window if kind != "full" else None)
        page = opts.state_bytes(layer) if kind in RECURRENT else _attention_page(layer, opts, block)
        count, _, _ = pages.get(key, (0, 0, 0))
        pages[key] = (count + 1, page, _blocks_per_request(layer, kind, opts, block))
    unified = max(page for _, page, _ in pages.values())  # state pages padded; attention pages equal here
    size = _group_size([count for count, _, _ in pages.values()])
    groups = []
    for (kind, _), (count, _, per_request) in pages.items():
        for i in range(cdiv(count, size)):
            layers = len(range(i, count, cdiv(count, size)))
            groups.append(CacheGroup(kind, layers, unified, block, per_request))
    bytes_per_block = max(group.layers * group.page_bytes for group in groups)
    return VllmLayout(
        groups=tuple(groups),
        bytes_per_block=bytes_per_block,
        blocks_per_request=sum(group.blocks_per_request for group in groups),
        max_model_len=opts.max_model_len,
    )
