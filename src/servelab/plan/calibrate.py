"""Read a running engine's own KV capacity (its log or /metrics) to set beside the plan."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from servelab.core.errors import UsageError
from servelab.core.urls import check_url
from servelab.engines.control import METRICS, EngineAPI
from servelab.engines.prometheus import info_labels, parse_exposition
from servelab.plan.engine_args import EngineArgs, engine_args_from_log
from servelab.plan.quant import GIB

_SIZE = re.compile(r"(GPU|CPU|XPU)[^\n]*KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_EXPLICIT = re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache")
_WEIGHTS = re.compile(r"Model loading took ([\d.]+) GiB")
_PEAK = re.compile(r"torch peak memory increase: ([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB")
_GRAPHS = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB total")
# llama.cpp (llama-kv-cache.cpp, llama-context.cpp)
_LLAMA_KV = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
_LLAMA_COMPUTE = re.compile(r"(\w+) compute buffer size = +([\d.]+) MiB")
_LLAMA_CTX = re.compile(r"llama_context: n_ctx_seq += (\d+)")
_LLAMA_SEQS = re.compile(r"llama_context: n_seq_max += (\d+)")
_LLAMA_UBATCH = re.compile(r"llama_context: n_ubatch += (\d+)")
_LLAMA_START = "llama_context: constructing llama_context"
_LLAMA_MODEL = re.compile(r"(\w+) model buffer size = +([\d.]+) MiB")
_LLAMA_LOAD = "load_tensors: loading model tensors"
MIB = 2**20


@dataclass(frozen=True, slots=True)
class Reported:
    source: str
    tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    available_bytes: int | None = None  # the KV memory the engine decided on
    weights_bytes: int | None = None
    num_blocks: int | None = None
    block_size: int | None = None
    torch_peak_bytes: int | None = None  # the profile run's activation peak (vLLM logs it at DEBUG)
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None  # the CUDA-graph estimate it deducted
    engine_args: EngineArgs | None = None  # its "non-default args"
    engine: str = "vllm"
    compute_buffer_bytes: int | None = None  # llama.cpp's compute buffers, all backends
    slots: int | None = None  # llama.cpp's n_seq_max
    kv_type: str | None = None  # llama.cpp's K cache type (f16, q8_0, ...)
    ubatch: int | None = None  # llama.cpp's n_ubatch (-ub): an SWA cache keeps its window plus one


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def parse_log(text: str, source: str = "log") -> Reported:
    """vLLM's start-up lines: KV cache size, maximum concurrency, available KV memory, weights."""
    size, conc = _SIZE.findall(text), _CONCURRENCY.findall(text)
    avail = _AVAILABLE.findall(text) or _EXPLICIT.findall(text)
    weights = _WEIGHTS.findall(text)
    peak, graphs = _PEAK.findall(text), _GRAPHS.findall(text)
    if not size:
        if _LLAMA_KV.search(text):
            return parse_llamacpp_log(text, source)
        raise UsageError(
            f"no 'KV cache size: N tokens' line (vLLM) or 'llama_kv_cache: size' line (llama.cpp) in {source}"
        )
    return Reported(
        source=source,
        tokens=_num(size[-1][1]),
        max_model_len=_num(conc[-1][0]) if conc else None,
        max_concurrency=float(conc[-1][1]) if conc else None,
        available_bytes=int(float(avail[-1]) * GIB) if avail else None,
        weights_bytes=int(float(weights[-1]) * GIB) if weights else None,
        torch_peak_bytes=int(float(peak[-1][0]) * GIB) if peak else None,
        non_torch_bytes=int(float(peak[-1][1]) * GIB) if peak else None,
        cudagraph_bytes=int(float(graphs[-1]) * GIB) if graphs else (0 if peak else None),
        engine_args=engine_args_from_log(text),
    )


def reported_from_metrics(text: str, source: str = "/metrics") -> Reported:
    """vLLM's ``cache_config_info`` gauge: num_gpu_blocks and block_size."""
    try:
        labels = info_labels(parse_exposition(text), "vllm:cache_config_info")
    except ValueError:
        labels = None
    if labels is None:
        raise UsageError(f"no vllm:cache_config_info in {source}: is it a vLLM server?")
    blocks = labels.get("num_gpu_blocks")
    block_size = labels.get("block_size")
    return Reported(
        source=source,
        num_blocks=int(blocks) if blocks and blocks.isdigit() else None,
        block_size=int(block_size) if block_size and block_size.isdigit() else None,
    )


def read_reported(where: str) -> Reported:
    if "://" in where:
        api = EngineAPI(check_url(where, "--calibrate"))
        try:
            text = api.metrics_text()
        except httpx.HTTPError as exc:
            raise UsageError(f"cannot read {api.root}{METRICS}: {exc}") from exc
        return reported_from_metrics(text, api.root + METRICS)
    path = Path(where)
    if not path.is_file():
        raise UsageError(f"--calibrate: no file {where!r}", hint="a running vLLM's URL (http://host:8000) or its log")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", errors="replace") as handle:
                return parse_log(handle.read(), str(path))
        return parse_log(path.read_text(errors="replace"), str(path))
    except (OSError, EOFError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Comparison:
    """Predicted beside reported: the rules (same pool → same tokens) and the budget (pool size)."""

    reported: Reported
    predicted_tokens_same_pool: int | None  # our rules applied to the engine's own KV memory
    predicted_pool_bytes: int  # our budget's KV memory
    predicted_tokens: int  # our budget's capacity
    tokens_per_block: int

    @property
    def rules_error_blocks(self) -> float | None:
        if self.predicted_tokens_same_pool is None or self.reported.tokens is None:
            return None
        return (self.predicted_tokens_same_pool - self.reported.tokens) / self.tokens_per_block


def parse_llamacpp_log(text: str, source: str = "log") -> Reported:
    """llama-server's start-up lines: the KV cache (cells, bytes) and the compute buffers. A model with
    sliding-window layers gets two caches (``llama_kv_cache_iswa``: non-SWA first, then SWA): the tokens are
    the non-SWA cache's, the bytes both together."""
    loaded = text[text.rfind(_LLAMA_LOAD) :] if _LLAMA_LOAD in text else text  # its last load (not the fit probe)
    weights = _LLAMA_MODEL.findall(loaded)
    text = text[text.rfind(_LLAMA_START) :] if _LLAMA_START in text else text  # the last start only
    caches = _LLAMA_KV.findall(text)
    kv = caches[0]
    compute = _LLAMA_COMPUTE.findall(text)
    per_seq, seqs, ubatch = _LLAMA_CTX.findall(text), _LLAMA_SEQS.findall(text), _LLAMA_UBATCH.findall(text)
    return Reported(
        source=source,
        tokens=int(kv[1]) * int(kv[4]),  # cells per stream x streams (one per slot unless --kv-unified)
        max_model_len=int(per_seq[-1]) if per_seq else None,
        available_bytes=round(sum(float(cache[0]) for cache in caches) * MIB),
        weights_bytes=round(sum(float(size) for _, size in weights) * MIB) if weights else None,  # all backends
        ubatch=int(ubatch[-1]) if ubatch else None,
        engine="llamacpp",
        compute_buffer_bytes=round(sum(float(size) for _, size in compute) * MIB) if compute else None,
        slots=int(seqs[-1]) if seqs else None,
        kv_type=kv[5],
    )
