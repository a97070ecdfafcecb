"""One point's measurement: a bench of the sweep's scenarios at its concurrency levels against the point's engine,
stored as a bench run of its own, and the figures the sweep keeps of each step (medians and percentiles of the ok
requests, with their counts; the share within the SLO, from the records)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.bench import SLO, Load, Scenario, at_levels, expand, run_bench
from servelab.core.records import RequestRecord
from servelab.core.results.sweep import PointEval, PointFigures
from servelab.core.store import RunStore
from servelab.core.summary import Summary
from servelab.eval import EvalOptions, load_items, run_eval
from servelab.load import Target

DEFAULT_MAX_TOKENS = 64  # a request scenario's output at each point unless --max-tokens says otherwise


@dataclass(frozen=True, slots=True)
class Workload:
    scenarios: tuple[str, ...] = ("code-chat",)
    concurrency: tuple[int, ...] = (1,)
    requests: int = 8
    max_tokens: int | None = None  # request scenarios: None is 64; session scenarios: None keeps the spec's replies
    evals: tuple[str, ...] = ()  # eval suites asked at each point after its bench (no code suites: no sandbox here)
    sessions: tuple[int, ...] | None = None  # a session scenario's levels (concurrent sessions); None: concurrency
    temperature: float = 0.0  # every request's sampling temperature (bench --temperature)


def measure(store: RunStore, target: Target, work: Workload, slo: SLO | None) -> tuple[str, list[PointFigures]]:
    """The bench runs' ids (the request scenarios' run, then the session scenarios' where both were asked: their
    output lengths differ) and each step's figures."""
    every = expand(list(work.scenarios))
    asked = [s for s in every if s.sessions is None], [s for s in every if s.sessions is not None]
    levels = work.concurrency, work.sessions or work.concurrency
    outputs = work.max_tokens or DEFAULT_MAX_TOKENS, work.max_tokens
    runs, figures = [], []
    for scenarios, at, max_tokens in zip(asked, levels, outputs, strict=True):
        if scenarios:
            run_id, got = _bench(store, target, at_levels(scenarios, at), Load(requests=work.requests,
                                 max_tokens=max_tokens, warmup=1, temperature=work.temperature), slo)  # fmt: skip
            runs.append(run_id)
            figures += got
    return ",".join(runs), figures


def _bench(store: RunStore, target: Target, scenarios: list[Scenario], load: Load,
           slo: SLO | None) -> tuple[str, list[PointFigures]]:  # fmt: skip
    result = run_bench(store, [target], scenarios, load, goodput=slo, args={"sweep_point": target.name})
    by_step: dict[str, list[RequestRecord]] = {}
    for record in result.records:
        by_step.setdefault(record.scenario, []).append(record)
    figures = [_figures(step.scenario, step.labels.level, step.summary, by_step.get(step.scenario, []), slo)
               for step in result.stored.steps]  # fmt: skip
    return result.run_id, figures


def evaluate(store: RunStore, target: Target, suites: Sequence[str]) -> tuple[str, list[PointEval]]:
    """The eval run's id and each suite's strict score at the point (every item once, the eval's defaults)."""
    result = run_eval(store, [target], load_items(list(suites)), EvalOptions(), args={"sweep_point": target.name})
    scores = result.stored.targets[target.name].suites if result.stored else {}
    return result.run_id, [PointEval(suite=name, k=a.strict.k, n=a.strict.n, rate=a.strict.rate, low=a.strict.low,
                                     high=a.strict.high) for name, a in scores.items()]  # fmt: skip


def _figures(
    name: str, level: int | None, s: Summary, records: Sequence[RequestRecord], slo: SLO | None
) -> PointFigures:
    return PointFigures(
        scenario=name,
        concurrency=level,
        requests=s.requests,
        ok=s.ok,
        tok_s_per_user=_finite(s.stream_tok_s.get("p50")),
        aggregate_tok_s=_finite(s.aggregate_tok_s) if s.ok else None,
        ttft_p50_ms=_finite(s.ttft_ms.get("p50")),
        ttft_p95_ms=_finite(s.ttft_ms.get("p95")),
        ttft_n=int(s.samples.get("ttft", 0)),
        ttft_max_ms=_finite(s.maxima.get("ttft_ms")),
        tok_s_n=int(s.samples.get("stream_tok_s", 0)),
        itl_p95_ms=_finite(s.itl_ms.get("p95")),
        slo_attained=slo.attained(list(records)) if slo is not None and records else None,
        sessions=any(r.labels.session is not None for r in records),
        peak_tokens=max((r.prompt_tokens + (r.completion_tokens or 0) for r in records
                         if r.ok and r.labels.session is not None and r.prompt_tokens is not None), default=None),
    )  # fmt: skip


def _finite(value: float | None) -> float | None:
    return None if value is None or value != value else float(value)
