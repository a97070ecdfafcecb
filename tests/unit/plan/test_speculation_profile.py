"""vLLM's V1 runner drives its rejection sampler in the profile run whenever speculation is on
(gpu_model_runner._dummy_sampler_run): 30 bytes a logit of one row a request instead of the plain sampler's 14, 34
where drafts are sampled. Checked against two H100 starts of Laguna's geometry (vLLM 0.25.1, dummy weights) that
differ only in ``--speculative-config '{"method": "ngram", ...}'`` (docs/data/h100-sweep-seed000-2026-12-06-s28)."""

from pathlib import Path

import pytest

from servelab.plan import resolve_model
from servelab.plan.engine_shape import EngineShape
from servelab.plan.overhead import activation_peak
from tests.unit.plan.graphs_planned import planned_from_log

ROOT = Path(__file__).resolve().parents[3]
RUNS = ROOT / "docs/data/h100-sweep-seed000-2026-12-06-s28"
LAGUNA = ROOT / "benchmarks/gpu/models/laguna-s-2.1-120e"
GIB = 2**30


def _planned(log: Path):  # type: ignore[no-untyped-def]
    return planned_from_log(log, LAGUNA, "h100")


def test_ngram_costs_what_vllm_kept_out_of_the_kv_cache() -> None:
    """What the ngram start gave up beside the plain one, its CUDA-graph estimate aside (48 graphs of at most
    500 tokens against 51 of 512), is the plan's rejection-sampler phase within 3%."""
    plain, plain_log, plain_cmp = _planned(RUNS / "point-0-engine.log.gz")
    ngram, ngram_log, ngram_cmp = _planned(RUNS / "point-2-engine.log.gz")
    assert ngram_log.engine_args is not None and ngram_log.engine_args.speculative_method == "ngram"
    assert plain_log.available_bytes and ngram_log.available_bytes
    assert plain_log.cudagraph_bytes and ngram_log.cudagraph_bytes
    logged = (plain_log.available_bytes - ngram_log.available_bytes) - (
        ngram_log.cudagraph_bytes - plain_log.cudagraph_bytes
    )
    planned = ngram.overhead_parts["activation"] - plain.overhead_parts["activation"]
    assert logged > GIB  # the effect is there to be matched (1.53 GiB)
    assert planned == pytest.approx(logged, rel=0.03)
    # the two starts now carry the same miss (Laguna's CUDA-graph estimate, docs/plan-calibration.md), no more
    plain_off = plain_cmp.predicted_pool_bytes / plain_log.available_bytes - 1
    ngram_off = ngram_cmp.predicted_pool_bytes / ngram_log.available_bytes - 1
    assert abs(ngram_off - plain_off) < 0.01


@pytest.mark.parametrize(
    ("shape", "per_logit"),
    [
        (EngineShape(), 14),
        (EngineShape(speculative_method="ngram", num_speculative_tokens=4), 30),
        (EngineShape(speculative_method="eagle3", num_speculative_tokens=3, draft_probabilistic=True), 34),
    ],
)
def test_the_sampler_phase_grows_by_the_rejection_samplers_bytes_a_logit(shape: EngineShape, per_logit: int) -> None:
    laguna = resolve_model(str(LAGUNA)).spec  # a MoE: vLLM's V1 runner whatever the speculation
    rows, vocab = shape.max_num_seqs, 100_352
    plain = activation_peak(laguna, EngineShape())[0]
    assert activation_peak(laguna, shape)[0] - plain == (per_logit - 14) * rows * vocab


def test_draft_sampling_is_read_from_the_speculative_config() -> None:
    from servelab.plan.engine_args import parse_engine_args

    def probabilistic(config: str) -> bool | None:
        return parse_engine_args(f"--speculative-config '{config}'").draft_probabilistic

    assert probabilistic('{"method": "eagle3", "model": "d", "draft_sample_method": "probabilistic"}') is True
    assert probabilistic('{"method": "eagle3", "model": "d", "draft_sample_method": "greedy"}') is False
    synthetic = '{"method": "ngram", "draft_sample_method": "probabilistic", "rejection_sample_method": "synthetic"}'
    assert probabilistic(synthetic) is False  # vLLM makes draft probabilities only for the standard method
    assert probabilistic('{"method": "ngram", "num_speculative_tokens": 4}') is None
