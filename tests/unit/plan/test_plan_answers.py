"""The plan's answers a new user acts on: the default context follows the model, a config.json path is named by its
folder, a llama.cpp plan speaks in llama.cpp's flags and buffers, a plan that does not fit says what would (each way
out planned again, never guessed), 'plan list' shows what a preset is and the GPUs, --calibrate lines its figures
up with the engine's."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.cli import main
from servelab.core.errors import UsageError
from servelab.plan import GPUS, PlanRequest, gpu, make_plan, parse_tokens, plan_model, preset_names, resolve_model

ROOT = Path(__file__).resolve().parents[3]
LOG = ROOT / "docs/data/h200-capacity-2026-12-01/llama8b-e2k.log.gz"


def _request(card: str = "rtx-4090", context: int = 0, concurrency: int = 1, engine: str = "vllm") -> PlanRequest:
    g = gpu(card)
    return PlanRequest(gpu_name=g.key, gpu_bytes=g.memory_bytes, bandwidth_gbs=g.bandwidth_gbs, context=context,
                       concurrency=concurrency, quant=None, kv_dtype="auto", engine=engine,
                       cuda_total_bytes=g.cuda_total_bytes)  # fmt: skip


def _run(argv: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("COLUMNS", "200")
    code = main(shlex.split(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_default_context_is_the_model_s_maximum_where_shorter(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """smollm2-135m holds 8,192 tokens: the plan takes that, and says so, instead of refusing a 32K default."""
    code, out = _run("plan smollm2-135m", capsys, monkeypatch)
    assert code == 0 and "of 8K on h100-80gb" in out
    assert "context 8,192 tokens: the model's maximum (no --context given)" in out
    planned, plan = plan_model(resolve_model("llama-3.1-8b"), _request("h200"))
    assert planned.context == 32768 and "32K" in plan.verdict  # a longer model keeps the 32K default
    with pytest.raises(UsageError, match="longer than smollm2-135m supports"):
        plan_model(resolve_model("smollm2-135m"), _request("h200", context=parse_tokens("32k")))  # asked: refused


def test_a_config_json_path_is_named_by_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "mistral-7b"
    folder.mkdir()
    shutil.copy(ROOT / "benchmarks/gpu/models/llama-3.1-8b/config.json", folder / "config.json")
    resolved = resolve_model(str(folder / "config.json"))
    assert resolved.spec.name == "mistral-7b" and resolved.serve_as == str(folder)
    code, out = _run(f"plan {folder / 'config.json'} --gpu h200", capsys, monkeypatch)
    assert code == 0 and out.startswith("mistral-7b: fits")
    assert f"command: vllm serve {folder} " in out and "vllm serve config" not in out


def test_a_llamacpp_plan_speaks_llamacpp(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _run("plan llama-3.1-8b --engine llamacpp --gpu rtx-4090 --context 32k --concurrency 2", capsys,
                     monkeypatch)  # fmt: skip
    assert code == 0
    assert out.startswith("llama-3.1-8b: fits: -c 65536 -np 2 -ngl 999 takes ")
    for said in ("model buffer (-ngl 999)", "KV buffer (-c cells)", "compute buffer", "command: llama-server"):
        assert said in out
    assert "gpu_memory_utilization" not in out and "utilization" not in out
    code, out = _run("plan llama-3.1-8b --engine llamacpp --gpu rtx-4090 --context 32k --concurrency 3", capsys,
                     monkeypatch)  # fmt: skip
    assert code == 3 and "does not fit 3 slots of 32K: -c 98304 -np 3 -ngl 999 needs" in out
    assert re.search(r"model buffer [\d.]+ GiB \+ KV buffer [\d.]+ GiB \(-c 98,304\)", out)
    assert "utilization" not in out


CASES = st.tuples(
    st.sampled_from(preset_names()),
    st.sampled_from(sorted(GPUS)),
    st.sampled_from([4096, 8192, 32768, 65536, 131072]),
    st.integers(1, 16),
    st.sampled_from(["vllm", "llamacpp"]),
)


@settings(max_examples=60, deadline=None)
@given(CASES)
def test_every_way_out_fits_when_planned_and_is_the_most_that_does(case: tuple[str, str, int, int, str]) -> None:
    """Whatever the model, card, context, sessions and engine: a plan that does not fit offers only changes whose
    own plan fits; a shorter context is the longest (in K) and fewer sessions the most that fit; llama.cpp's verdict
    is in its buffers, never a memory fraction."""
    name, card, context, sessions, engine = case
    resolved = resolve_model(name)
    if resolved.spec.max_position and context > resolved.spec.max_position:
        context = resolved.spec.max_position
    try:
        req, plan = plan_model(resolved, _request(card, context, sessions, engine))
    except UsageError:
        return  # an engine that refuses the model (llama.cpp and an architecture it lacks) is said elsewhere
    if engine == "llamacpp":
        assert "utilization" not in plan.verdict + " ".join(plan.reasons)
        used = plan.weights.bytes + plan.overhead_bytes + plan.kv_pool_bytes
        assert plan.fits == (used <= plan.gpu_bytes - plan.cotenant_bytes - plan.headroom_bytes)
    if plan.fits:
        assert plan.suggestions == []
    for way in plan.suggestions:
        flag, value = way.split(":")[0].split()
        changed = _changed(req, flag, value)
        assert make_plan(resolved, changed).fits, way
        if flag == "--context":
            assert not make_plan(resolved, replace(changed, context=changed.context + 1024)).fits
        if flag == "--concurrency":
            assert not make_plan(resolved, replace(changed, concurrency=changed.concurrency + 1)).fits


def _changed(req: PlanRequest, flag: str, value: str) -> PlanRequest:
    if flag == "--kv-dtype":
        return replace(req, kv_dtype=value)
    if flag == "--quant":
        return replace(req, quant=value)
    if flag == "--context":
        return replace(req, context=parse_tokens(value))
    assert flag == "--concurrency"
    return replace(req, concurrency=int(value))


def test_a_plan_that_does_not_fit_says_what_would(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = _run("plan llama-3.1-8b --gpu rtx-4090 --context 32k --concurrency 4", capsys, monkeypatch)
    assert code == 3 and "what would fit (each planned again with one change):" in out
    assert "  --quant int4: fits: holds 4 sessions of 32K" in out
    held = float(re.search(r"holds ([\d.]+) sessions", out.splitlines()[0]).group(1))  # type: ignore[union-attr]
    fewer = math.floor(held)  # vLLM's 2,048-token default budget on a 4090 leaves room for 2.1
    assert f"  --concurrency {fewer}: fits: holds {fewer} session{'s' if fewer > 1 else ''} of 32K" in out
    code, out = _run("plan laguna-s-2.1 --gpu rtx-4090", capsys, monkeypatch)
    assert code == 3 and "no single change fits on rtx-4090" in out


def test_plan_list_shows_what_each_preset_is_and_the_gpus(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = _run("plan list", capsys, monkeypatch)
    assert code == 0
    row = next(line for line in out.splitlines() if "laguna-s-2.1" in line)
    assert "117.6B" in row and "laguna: 12 full + 36 sliding, MoE 10 of 256" in row and "1,048,576" in row
    assert all(key in out for key in GPUS) and "H100 SXM 80 GB" in out and "3,350 GB/s" in out
    code, out = _run("plan list --json", capsys, monkeypatch)
    data = json.loads(out)
    smol = next(p for p in data["presets"] if p["name"] == "smollm2-135m")
    assert smol["max_context"] == 8192 and smol["architecture"] == "llama: 30 full"
    assert smol["total_params"] == resolve_model("smollm2-135m").spec.total_params
    assert [g["key"] for g in data["gpus"]] == list(GPUS)


def test_calibrate_lines_predicted_and_reported_up(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = f"plan {ROOT / 'benchmarks/gpu/models/llama-3.1-8b'} --gpu h200 --calibrate {LOG}"
    _, out = _run(argv + " --json", capsys, monkeypatch)
    calibration = json.loads(out)["calibration"]
    _, out = _run(argv, capsys, monkeypatch)
    assert re.search(r"figure\s+predicted\s+reported\s+difference", out)
    predicted, reported = calibration["predicted_tokens_same_pool"], calibration["reported"]["tokens"]
    row = next(line for line in out.splitlines() if "KV cache size, same KV memory" in line)
    cells = [c.strip() for c in re.split(r"\s{2,}", row) if c.strip()]
    share = (predicted - reported) / reported
    assert cells[1:] == [f"{predicted:,}", f"{reported:,}", f"{predicted - reported:+,} ({share:+.1%})"]
