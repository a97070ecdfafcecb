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

_INT = r"(\d{1,3}(?:,\d{3})+|\d+)"  # 492,156 or 492156
_REAL = r"(\d+(?:\.\d+)?)(?![\d.])"  # 13.51, never 1.2.3
_SIZE = re.compile(r"\b(?:GPU|CPU|XPU) KV cache size: " + _INT + r" tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _INT + r" tokens per request: " + _REAL + "x")
_AVAILABLE = re.compile(r"Available KV cache memory: " + _REAL + " GiB")
_EXPLICIT = re.compile(r"Explicitly set \(" + _REAL + r"/[\d.]+\) GiB for KV cache")
_WEIGHTS = re.compile(r"Model loading took " + _REAL + " GiB")
_PEAK = re.compile(r"torch peak memory increase: " + _REAL + "GiB; non-torch forward increase memory: " + _REAL + "GiB")
_GRAPHS = re.compile(r"Estimated CUDA graph memory: " + _REAL + " GiB total")
# where a vLLM start begins: the API server's first lines, else the engine core's (a log may hold several starts)
_VLLM_STARTS = (
    re.compile(r"vLLM API server version|non-default args: \{"),
    re.compile(r"Initializing a V\d LLM engine"),
)
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


def last_vllm_start(text: str) -> str:
    """The log from its last start on (a log appended to by several starts reads as the last one): its API
    server's first lines where it has them, else its engine core's."""
    for marker in _VLLM_STARTS:
        starts = [m.start() for m in marker.finditer(text)]
        if starts:
            first = _first_of_run(text, starts)
            return text[text.rfind("\n", 0, first) + 1 :]
    return text


def _first_of_run(text: str, starts: list[int]) -> int:
    """The first of the last start's API-server lines (its version line and its args line come together)."""
    first = starts[-1]
    for p in reversed(starts[:-1]):
        between = text[p:first]
        if between.count("\n") > 3:
            break
        first = p
    return first


def parse_log(text: str, source: str = "log") -> Reported:
    """vLLM's start-up lines: KV cache size, maximum concurrency, available KV memory, weights; of its last start
    where the log holds several (one that did not get as far as its KV cache is said, never filled in from an
    earlier one)."""
    if not _SIZE.search(text) and _LLAMA_KV.search(text):
        return parse_llamacpp_log(text, source)
    whole, text = text, last_vllm_start(text)
    if _SIZE.search(whole) and not _SIZE.search(text):
        raise UsageError(f"the last start in {source} logged no KV cache size (it did not get that far); an earlier "
                         "start did: give a log of one start")  # fmt: skip
    size, conc = _SIZE.findall(text), _CONCURRENCY.findall(text)
    avail = _AVAILABLE.findall(text) or _EXPLICIT.findall(text)
    weights = _WEIGHTS.findall(text)
    peak, graphs = _PEAK.findall(text), _GRAPHS.findall(text)
    if not size:
        raise UsageError(
            f"no 'KV cache size: N tokens' line (vLLM) or 'llama_kv_cache: size' line (llama.cpp) in {source}"
        )
    return Reported(
        source=source,
        tokens=_num(size[-1]),
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
    if not caches:  # the last context never allocated its cache (it failed, or the log ends first)
        raise UsageError(f"the last start in {source} logged no llama_kv_cache size (it did not get that far)")
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
