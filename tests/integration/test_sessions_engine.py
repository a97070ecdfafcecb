"""Session workloads against the real engines' own prefix caches: vLLM (CPU build, 8K context) and llama.cpp's
llama-server (its slots' cache). Later turns report cached tokens (the previous prompt and the streamed reply)
and answer sooner than the first, whose 1.5K-token head was cold."""

from __future__ import annotations

from pathlib import Path
from statistics import median

from servelab.bench import Load, resolve_targets, run_bench
from servelab.core.records import RequestRecord
from servelab.core.store import RunStore
from servelab.core.summary import ttft_ms
from servelab.engines.embedded import EngineState
from servelab.load.sessions import SessionSpec, of_spec

SPEC = SessionSpec.model_validate(
    {"name": "itest", "sessions": 2, "turns": 3, "head_tokens": 1500, "turn_tokens": 40, "output_tokens": 16}
)


def _check_sessions(engine: EngineState, tmp_path: Path, target: str) -> list[RequestRecord]:
    with RunStore(tmp_path / "runs.sqlite") as store:
        result = run_bench(store, resolve_targets([(target, engine.url)]), [of_spec(SPEC)], Load(warmup=1))
    turns = [r for r in result.records if r.labels.turn is not None]
    assert len(turns) == 6 and all(r.ok for r in turns), [r.error_detail for r in turns]
    first = [r for r in turns if r.labels.turn == 1]
    later = [r for r in turns if (r.labels.turn or 0) > 1]
    assert all(r.cached_tokens is not None and r.cached_tokens > 0.8 * (r.prompt_tokens or 0) for r in later), [
        (r.cached_tokens, r.prompt_tokens) for r in later
    ]
    assert median(ttft_ms(r) or 0 for r in later) < median(ttft_ms(r) or 0 for r in first)
    figures = result.stored.steps[0].sessions
    assert figures is not None and figures.hit_share is not None and figures.hit_share > 0.5
    return turns


def test_vllm_sessions_hit_its_prefix_cache(engine: EngineState, tmp_path: Path) -> None:
    _check_sessions(engine, tmp_path, "vllm")


def test_llamacpp_sessions_hit_its_slot_cache(llamacpp_engine: EngineState, tmp_path: Path) -> None:
    turns = _check_sessions(llamacpp_engine, tmp_path, "llamacpp")
    assert all(r.server_timings is not None for r in turns)
