"""Scrape an engine's Prometheus /metrics during a run, on the client's perf_counter timeline.

vLLM names its series ``vllm:...``, SGLang ``sglang:...``, llama.cpp ``llamacpp:...``; names drift between
versions, so the derived figures look a series up by several names and report what they found.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from servelab.core.results import Scalar
from servelab.engines.control import AsyncEngineAPI
from servelab.engines.prometheus import MetricSample, parse_exposition, summed

PREFIXES = ("vllm:", "sglang:", "llamacpp:")
# the serving process's own CPU counter (prometheus_client's default registry): vLLM publishes it for its one API
# server (with several, its multiprocess registry has no process series), so a server on another host still says
# how busy its HTTP frontend was
PROCESS_CPU = "process_cpu_seconds_total"

# figure -> candidate sample names, first found wins
SERIES: dict[str, tuple[str, ...]] = {
    "kv_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "spec_accepted": ("vllm:spec_decode_num_accepted_tokens_total",),
    "spec_drafted": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "generation_tokens": (
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "llamacpp:tokens_predicted_total",
    ),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    # the server's own clocks: TTFT (from its arrival) and the time in the engine's queue, as histogram sums
    "server_ttft_sum": ("vllm:time_to_first_token_seconds_sum", "sglang:time_to_first_token_seconds_sum"),
    "server_ttft_count": ("vllm:time_to_first_token_seconds_count", "sglang:time_to_first_token_seconds_count"),
    "queue_time_sum": ("vllm:request_queue_time_seconds_sum", "sglang:queue_time_seconds_sum"),
    "queue_time_count": ("vllm:request_queue_time_seconds_count", "sglang:queue_time_seconds_count"),
    "prefill_time_sum": ("vllm:request_prefill_time_seconds_sum",),
    "prefill_time_count": ("vllm:request_prefill_time_seconds_count",),
    "frontend_cpu_s": (PROCESS_CPU,),  # CPU-seconds of the process serving /metrics (vLLM's one API server)
    # the engine's inter-token time summed over every token: request-seconds spent decoding (engine clocks)
    "itl_sum": (
        "vllm:inter_token_latency_seconds_sum",
        "vllm:time_per_output_token_seconds_sum",
        "sglang:inter_token_latency_seconds_sum",
    ),
}


@dataclass(frozen=True, slots=True)
class Sample:
    at_ns: int  # client perf_counter_ns, midpoint of the scrape
    values: dict[str, float]  # sample name (labels summed) -> value


def engine_values(text: str) -> dict[str, float]:
    """Engine series from a Prometheus exposition, summed over labels."""
    return summed(parse_exposition(text), PREFIXES)


def scraped_values(samples: Iterable[MetricSample]) -> dict[str, float]:
    """The engine's series and the serving process's CPU counter, summed over labels; empty when the exposition has
    no engine series (a process counter alone says nothing of an engine)."""
    values = summed(samples, (*PREFIXES, PROCESS_CPU))
    return values if any(name.startswith(PREFIXES) for name in values) else {}


def figure(values: dict[str, float], name: str) -> float | None:
    for candidate in SERIES[name]:
        if candidate in values:
            return values[candidate]
    return None


@dataclass
class Scraper:
    """Background task: the target's /metrics every ``interval`` seconds until stopped."""

    url: str  # the target (any form: its server root or its /v1)
    interval: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> list[Sample]:
        """Stop, after one last scrape: counters of the last request are published a moment after it ends."""
        if self._task:
            self._task.cancel()
            await asyncio.wait([self._task])  # a cancel of the caller itself still reaches it
            await asyncio.sleep(min(self.interval, 0.5))
            api = AsyncEngineAPI(self.url, timeout=5.0)
            try:
                await self.scrape_once(api)
            finally:
                await api.aclose()
        return self.samples

    async def mark(self) -> None:
        """One scrape now, out of turn: the step's counters just before its measured load (after its warm-up, whose
        request's queue and prefill times are published when it ends, mid-way between two regular scrapes)."""
        api = AsyncEngineAPI(self.url, timeout=5.0)
        try:
            await self.scrape_once(api)
        finally:
            await api.aclose()

    async def _loop(self) -> None:
        api = AsyncEngineAPI(self.url, timeout=5.0)
        try:
            while True:
                await self.scrape_once(api)
                await asyncio.sleep(self.interval)
        finally:
            await api.aclose()

    async def scrape_once(self, api: AsyncEngineAPI) -> None:
        before = time.perf_counter_ns()
        try:
            status, samples = await api.metrics()
        except (httpx.HTTPError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        if values := scraped_values(samples):
            bisect.insort(self.samples, Sample((before + time.perf_counter_ns()) // 2, values), key=_at)
        elif self.error is None:
            self.error = f"HTTP {status} or no engine series at {api.root}/metrics"


def _at(sample: Sample) -> int:
    return sample.at_ns


def _delta(samples: list[Sample], name: str) -> float | None:
    seen = [v for v in (figure(s.values, name) for s in samples) if v is not None]
    return seen[-1] - seen[0] if len(seen) >= 2 else None


def derive(samples: list[Sample]) -> dict[str, Scalar]:
    """Run-level figures from the series: peak KV usage and queue, prefix-cache hit rate, speculative
    decoding acceptance rate and mean accepted length (with a loud flag for an acceptance of 0)."""
    out: dict[str, Scalar] = {"samples": len(samples)}
    for name in ("kv_usage", "running", "waiting"):
        seen = [v for v in (figure(s.values, name) for s in samples) if v is not None]
        out[f"{name}_max"] = max(seen) if seen else None
    hits, queries = _delta(samples, "prefix_hits"), _delta(samples, "prefix_queries")
    out["prefix_hit_rate"] = hits / queries if hits is not None and queries else None
    out["preemptions"] = _delta(samples, "preemptions")
    accepted, drafted, drafts = (_delta(samples, n) for n in ("spec_accepted", "spec_drafted", "spec_drafts"))
    out["spec_acceptance_rate"] = accepted / drafted if accepted is not None and drafted else None
    out["spec_mean_accepted_length"] = 1 + accepted / drafts if accepted is not None and drafts else None
    out["spec_warning"] = (
        "draft acceptance 0.00: speculative decoding is a pure slowdown here" if drafted and not accepted else None
    )
    return out


def series(samples: Iterable[Sample], name: str, t0_ns: int) -> list[tuple[float, float]]:
    """(seconds since t0, value) for one figure: the time series a plot wants."""
    return [((s.at_ns - t0_ns) / 1e9, v) for s in samples if (v := figure(s.values, name)) is not None]
