"""The plan's predicted speed: bytes a decode step reads (by hand for a dense and an MoE config), per-stream speed
that never rises and aggregate that never falls with the concurrency, and a fit that recovers known constants
from synthetic points with the held-out points reported apart."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.cli import main
from servelab.core.store import RunStore
from servelab.load import Target
from servelab.plan import preset_names, resolve_model, spec_from_config
from servelab.plan.budget import scheme_of
from servelab.plan.fit import Measured, fit_constants, split
from servelab.plan.measured import points_from_runs
from servelab.plan.quant import WeightEstimate, estimate_weights, scheme_for
from servelab.plan.speed import Constants, decode_point, prefill_s, workload

TINY: dict[str, Any] = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 1000,
                        "tie_word_embeddings": True, "max_position_embeddings": 4096}  # fmt: skip
KV_PER_TOKEN = 2 * 2 * 16 * 2 * 2  # layers x (K and V) x kv heads x head dim x 2 bytes = 256


def _work(config: dict[str, Any], weights: int | None = None):  # type: ignore[no-untyped-def]
    spec = spec_from_config(config)
    scheme = scheme_for("bf16")
    given_weights = WeightEstimate(weights or estimate_weights(spec, scheme).bytes, "given")
    return workload(spec, given_weights, scheme, 2.0), given_weights.bytes


def test_bytes_a_step_by_hand_dense() -> None:
    """Tied embeddings: every weight byte is read each step (the table is the lm_head), plus each stream's KV."""
    work, _ = _work(TINY, 10**9)
    nbytes, flops = work.decode_step(4, 1000)
    assert nbytes == pytest.approx(10**9 + 4 * KV_PER_TOKEN * 1000)
    active = 64000 + 2 * (64 * 64 * 2 + 64 * 32 * 2) + 2 * 3 * 64 * 128 + 64 * 5  # embedding, attention, MLP, norms
    assert flops == pytest.approx(4 * (2 * active + 4 * 64 * 2 * 1000))


def test_bytes_a_step_by_hand_moe() -> None:
    """8 experts of 3 x 64 x 32 parameters in 2 MoE layers, 2 a token: a batch of c touches 8 (1 - (6/8)^c) a layer."""
    moe = TINY | {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
                  "intermediate_size": 32}  # fmt: skip
    work, weights = _work(moe)  # the estimate itself: each expert's bytes are its bf16 parameters
    expert = 3 * 64 * 32 * 2
    for c, touched in ((1, 2.0), (4, 8 * (1 - 0.75**4))):
        nbytes, _ = work.decode_step(c, 500)
        assert nbytes == pytest.approx(weights - 8 * 2 * expert + 2 * touched * expert + c * KV_PER_TOKEN * 500)


@settings(max_examples=40, deadline=None)
@given(
    preset=st.sampled_from(preset_names()),
    c=st.integers(1, 2048),
    more=st.integers(1, 512),
    length=st.integers(1, 1 << 17),
    card=st.sampled_from([(3350.0, 989.4), (1008.0, 165.2), (273.0, 125.0)]),
)
def test_per_stream_speed_never_rises_and_aggregate_never_falls_with_concurrency(
    preset: str, c: int, more: int, length: int, card: tuple[float, float]
) -> None:
    resolved = resolve_model(preset)
    spec = resolved.spec
    scheme = spec.quantization or scheme_for("bf16")
    work = workload(spec, estimate_weights(spec, scheme), scheme, 2.0)
    consts = Constants(*card)
    low, high = decode_point(work, consts, c, length), decode_point(work, consts, c + more, length)
    assert high.bytes_per_step >= low.bytes_per_step
    assert high.tok_s_per_stream <= low.tok_s_per_stream * (1 + 1e-12)
    assert high.tok_s_aggregate >= low.tok_s_aggregate * (1 - 1e-12)
    assert prefill_s(work, consts, 1024, 8192, prompts=c + more) >= prefill_s(work, consts, 1024, 8192, prompts=c)


def _synthetic(consts: Constants, noise: list[float] | None = None) -> tuple[Any, list[Measured]]:
    """Points measured on an imaginary card with these constants: decode at 1 to 512 streams, short and long, and
    at thousands of short streams, where the FLOPs bind."""
    work = workload(*(lambda r: (r.spec, estimate_weights(r.spec, scheme_of(r, _req())), scheme_of(r, _req())))(
        resolve_model("llama-3.1-8b")), 2.0)  # fmt: skip
    points = []
    shapes = [(c, n) for c in (1, 2, 4, 8, 16, 64, 128, 256, 512) for n in (600, 6000)]
    for i, (c, length) in enumerate(shapes + [(c, 100) for c in (2048, 4096, 8192)]):
        seconds, _ = consts.step_s(*work.decode_step(c, length))
        factor = 1 + (noise[i % len(noise)] if noise else 0.0)
        points.append(Measured(c, length, factor / seconds, f"synthetic c={c}"))
    return work, points


def _req():  # type: ignore[no-untyped-def]
    from servelab.plan import PlanRequest

    return PlanRequest(gpu_name="x", gpu_bytes=80 * 2**30, bandwidth_gbs=3350.0, context=8192, concurrency=1,
                       quant=None, kv_dtype="auto")  # fmt: skip


@settings(max_examples=10, deadline=None)
@given(e_bw=st.floats(0.3, 0.95), e_fl=st.floats(0.05, 0.9), t0_ms=st.floats(0.2, 5.0))
def test_the_fit_recovers_known_constants_from_synthetic_points(e_bw: float, e_fl: float, t0_ms: float) -> None:
    truth = Constants(3350.0, 989.4, e_bw, e_fl, t0_ms / 1e3)
    work, points = _synthetic(truth)
    fit = fit_constants(work, Constants(3350.0, 989.4), points)
    got = fit.constants
    assert got.bandwidth_efficiency == pytest.approx(e_bw, rel=0.03)
    assert got.step_overhead_s == pytest.approx(t0_ms / 1e3, rel=0.05, abs=2e-5)
    if "FLOP efficiency" not in fit.undetermined:
        assert got.flop_efficiency == pytest.approx(e_fl, rel=0.03)
    assert fit.rms_fit < 0.01 and fit.rms_held_out is not None and fit.rms_held_out < 0.01


def test_held_out_points_are_reported_apart_with_their_residuals() -> None:
    """With 2% noise the residuals say so, and the held-out third are judged on constants fitted without them."""
    truth = Constants(3350.0, 989.4, 0.7, 0.4, 1.5e-3)
    work, points = _synthetic(truth, noise=[0.02, -0.02, 0.01, -0.01, 0.0])
    fit = fit_constants(work, Constants(3350.0, 989.4), points)
    fitted, held = split(points)
    assert len(fit.held_out) == len(held) == len(points) // 3 and len(fit.rows) == len(points)
    assert {r.point for r in fit.held_out} == set(held) and not set(held) & set(fitted)
    assert 0.003 < fit.rms_fit < 0.03 and fit.rms_held_out is not None and 0.003 < fit.rms_held_out < 0.03
    assert all(r.residual == pytest.approx(r.predicted_tok_s / r.point.tok_s - 1) for r in fit.rows)


def test_too_few_points_is_a_clear_error() -> None:
    from servelab.core.errors import UsageError

    work, points = _synthetic(Constants(3350.0, 989.4))
    with pytest.raises(UsageError, match="at least 3"):
        fit_constants(work, Constants(3350.0, 989.4), points[:2])


@pytest.mark.parametrize("sim", [["--max-running", "8", "--step-ms", "4"]], indirect=True)
def test_plan_fit_reads_a_stored_bench_run(sim: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bench at four concurrencies stored, then fitted: one point a step, every third held out, in --json."""
    store = tmp_path / "runs.sqlite"
    code = main(["bench", "--target", f"sim={sim.url}", "--scenario", "synthetic:64:24", "--sweep", "1,2,3,4",
                 "--requests", "4", "--store", str(store), "--json"])  # fmt: skip
    assert code == 0
    capsys.readouterr()
    with RunStore(store) as db:
        points = points_from_runs(db, ["latest"])
    assert sorted(p.concurrency for p in points) == [1, 2, 3, 4] and all(p.tok_s > 0 for p in points)
    assert main(["plan", "smollm2-135m", "--gpu", "h200", "--fit", "latest", "--store", str(store), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["fit"]["rows"]) == 4 and sum(r["held_out"] for r in data["fit"]["rows"]) == 1
    assert data["speed"]["constants"]["source"].startswith("fitted to 3 measured points (1 held out)")


@pytest.mark.parametrize("sim", [["--max-running", "8", "--step-ms", "4"]], indirect=True)
def test_plan_fit_reads_one_point_of_a_stored_sweep(sim: Target, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A sweep's points are bench runs stored after it: ``SWEEP:point-N`` fits that point's steps, ``SWEEP`` alone
    of several configurations is refused naming them."""
    from servelab.core.errors import UsageError
    from servelab.core.recorder import RunRecorder
    from servelab.core.results.sweep import SweepPoint, SweepRun
    from servelab.core.store import STATUS_COMPLETE

    store = tmp_path / "runs.sqlite"
    benches = []
    for name, levels in (("point-0", "1,2,3"), ("point-1", "1,2,3,4")):
        assert main(["bench", "--target", f"{name}={sim.url}", "--scenario", "synthetic:64:24", "--sweep", levels,
                     "--requests", "4", "--store", str(store), "--json"]) == 0  # fmt: skip
        benches.append(json.loads(capsys.readouterr().out)["run_id"])
    with RunStore(store) as db:
        sweep = RunRecorder(db, "sweep", {"kind": "sweep"})
        # point 1 ran request and session scenarios: two bench runs, the request one first
        runs = [benches[0], f"{benches[1]},{benches[0]}"]
        points = [SweepPoint(index=i, key=f"-np {i}", status="measured", bench_run=b) for i, b in enumerate(runs)]
        sweep.result(SweepRun(engine="llamacpp", planned=[p.key for p in points], points=points))
        sweep.finish(STATUS_COMPLETE)
        assert sorted(p.concurrency for p in points_from_runs(db, [f"{sweep.run_id}:point-1"])) == [1, 2, 3, 4]
        assert sorted(p.concurrency for p in points_from_runs(db, [f"{sweep.run_id[:20]}:point-0"])) == [1, 2, 3]
        with pytest.raises(UsageError, match="measured 2 configurations: name the one to fit") as named:
            points_from_runs(db, ["latest"])
        assert named.value.hint and f"{sweep.run_id}:point-0" in named.value.hint
        with pytest.raises(UsageError, match="has no measured 'point-7'"):
            points_from_runs(db, [f"{sweep.run_id}:point-7"])


def test_a_fit_of_a_run_that_is_not_a_bench_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.sqlite"
    assert main(["plan", "smollm2-135m", "--gpu", "h200", "--store", str(store)]) == 0  # stores nothing
    assert main(["plan", "smollm2-135m", "--gpu", "h200", "--fit", "nope", "--store", str(store)]) == 1
    assert "no run 'nope'" in capsys.readouterr().err


def test_the_plan_states_its_constants() -> None:
    from servelab.plan import gpu, make_plan

    card = gpu("h100-80gb")
    req = replace(_req(), gpu_bytes=card.memory_bytes, bandwidth_gbs=card.bandwidth_gbs, tflops=card.tflops,
                  concurrency=6)  # fmt: skip
    plan = make_plan(resolve_model("llama-3.1-8b"), req)
    # 64 streams of 8K are more than the card holds (63.3 at the most utilisation): not predicted, and said
    assert plan.speed is not None and [p.concurrency for p in plan.speed.points] == [1, 4, 6, 16]
    assert plan.speed.constants.source == "defaults from the GPU table" and plan.speed.ttft_last_ms > 0
    assert any(note.startswith("64 streams: more than the 63.3 sequences") for note in plan.speed.notes)


def test_no_speed_is_predicted_for_what_cannot_run() -> None:
    """A plan that does not fit has no speed; a prompt past the context is predicted at the context, and said."""
    from servelab.plan import gpu, make_plan

    card = gpu("h100-80gb")
    base = replace(_req(), gpu_bytes=card.memory_bytes, bandwidth_gbs=card.bandwidth_gbs, tflops=card.tflops)
    assert make_plan(resolve_model("llama-3.1-70b"), base).speed is None  # 131 GiB of weights on 80
    long = make_plan(resolve_model("llama-3.1-8b"), replace(base, prompt_tokens=100_000))
    at_context = make_plan(resolve_model("llama-3.1-8b"), replace(base, prompt_tokens=base.context))
    assert long.speed is not None and at_context.speed is not None
    assert long.speed.prompt_tokens == base.context and long.speed.prefill_ms == at_context.speed.prefill_ms
    assert any("past the context" in note for note in long.speed.notes)


def test_a_prefill_prices_a_bounded_number_of_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """100M tokens in steps of 16 once spun for minutes: the steps are priced in groups, and the total stays the
    sum of its steps (exact where the steps are equal)."""
    from servelab.plan import speed

    work, _ = _synthetic(Constants(3350.0, 989.4, 0.7, 0.4, 1.5e-3))
    consts = Constants(3350.0, 989.4, 0.7, 0.4, 1.5e-3)
    calls = []
    real = Constants.step_s
    monkeypatch.setattr(Constants, "step_s", lambda self, *a: calls.append(1) or real(self, *a))
    long = speed.prefill_s(work, consts, 100_000_000, 16)
    assert len(calls) <= speed.MAX_STEPS + 2 and long > 0
    calls.clear()
    short = speed.prefill_s(work, consts, 4096, 512)  # 8 steps: each priced
    assert len(calls) == 8 and short > 0


def test_hold_out_leaves_the_named_concurrencies_out_of_the_fit() -> None:
    """--hold-out 1,4: every point at those concurrencies predicted by constants fitted on the others alone (with
    2% noise on the fitted points and none on the held-out ones, their residuals are the fit's error alone)."""
    truth = Constants(3350.0, 989.4, 0.7, 0.4, 1.5e-3)
    work, points = _synthetic(truth)
    noisy = [p if p.concurrency in (1, 4) else replace(p, tok_s=p.tok_s * (1.02 if i % 2 else 0.98))
             for i, p in enumerate(points)]  # fmt: skip
    fit = fit_constants(work, Constants(3350.0, 989.4), noisy, frozenset({1, 4}))
    assert {r.point.concurrency for r in fit.held_out} == {1, 4} and len(fit.held_out) == 4 and fit.hold_out == [1, 4]
    assert not any(r.point.concurrency in (1, 4) for r in fit.rows if not r.held_out)
    assert fit.rms_held_out is not None and fit.rms_held_out < 0.03
    from servelab.core.errors import UsageError

    with pytest.raises(UsageError, match="no measured step at that concurrency"):
        fit_constants(work, Constants(3350.0, 989.4), points, frozenset({3}))
    with pytest.raises(UsageError, match="at least 3"):
        fit_constants(work, Constants(3350.0, 989.4), points[:6], frozenset({1, 2}))


def test_hold_out_without_fit_or_with_a_bad_level_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "smollm2-135m", "--gpu", "h200", "--hold-out", "1,4"]) == 2
    assert "--hold-out goes with --fit" in capsys.readouterr().err
    assert main(["plan", "smollm2-135m", "--gpu", "h200", "--fit", "latest", "--hold-out", "one"]) == 2
    assert "--hold-out wants concurrencies" in capsys.readouterr().err


def test_no_more_streams_are_predicted_than_the_command_runs_at_once() -> None:
    """--max-num-seqs 2 runs two at a time; --gpu-memory-utilization 0.30 holds what 0.30 holds, not what the card
    could (the speed rows once went to 16 and 64 streams beside both)."""
    from servelab.plan import gpu, make_plan, parse_engine_args, with_engine_args

    card = gpu("h100-80gb")
    base = replace(_req(), gpu_bytes=card.memory_bytes, bandwidth_gbs=card.bandwidth_gbs, tflops=card.tflops)
    two = make_plan(resolve_model("llama-3.1-8b"), with_engine_args(base, parse_engine_args("--max-num-seqs 2")))
    assert two.speed is not None and [p.concurrency for p in two.speed.points] == [1]
    low = with_engine_args(base, parse_engine_args("--gpu-memory-utilization 0.30 --max-model-len 8192"))
    held = make_plan(resolve_model("llama-3.1-8b"), low)
    assert held.speed is not None and max(p.concurrency for p in held.speed.points) <= held.capacity.max_sequences


@pytest.mark.parametrize(("prompt", "budget", "prompts"), [(131072, 65536, 3000), (32768, 16384, 2100),
                                                           (4096, 2048, 2049), (3000, 2048, 9000)])  # fmt: skip
def test_a_long_prefill_is_priced_exactly_where_its_steps_repeat(prompt: int, budget: int, prompts: int) -> None:
    """Grouped steps priced at their middle step came out 18-47% high where a group spanned a fixed part of each
    prompt: whole periods of lcm(prompt, budget) tokens are exact, whatever the prompt count."""
    from servelab.plan import speed

    consts = Constants(3350.0, 989.4, 0.7, 0.4, 1.5e-3)
    work, _ = _synthetic(consts)
    exact = speed._steps_s(work, consts, prompt, budget, prompt * prompts, 1)
    assert speed.prefill_s(work, consts, prompt, budget, prompts) == pytest.approx(exact, rel=1e-9)
