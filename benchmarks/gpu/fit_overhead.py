"""servelab's vLLM plan against vLLM's own start-up logs (H200, vLLM 0.25.1, dummy weights).

For every recorded start: the plan made from the model folder and the flags the log itself lists
("non-default args"), beside what vLLM logged: weights, the profile run's torch peak, the CUDA-graph
estimate, the KV memory and the "GPU KV cache size". ``--fit`` re-derives the overhead constants
from the runs marked ``fit`` (each constant from the runs that determine it) and prints them beside
the ones in src/servelab/plan/overhead.py; the runs marked ``held-out`` never enter a fit.

usage: python benchmarks/gpu/fit_overhead.py [--fit] [--markdown]
"""

from __future__ import annotations

import argparse
import gzip
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from servelab.plan import overhead  # noqa: E402
from servelab.plan.budget import PlanRequest, make_plan  # noqa: E402
from servelab.plan.calibrate import Reported, parse_log  # noqa: E402
from servelab.plan.gpus import gpu  # noqa: E402
from servelab.plan.request import with_engine_args  # noqa: E402
from servelab.plan.resolve import resolve_model  # noqa: E402

GIB = 2**30
NEW = ROOT / "docs/data/h200-capacity-2026-12-01"
OLD = ROOT / "docs/data/h200-2026-11-30"
# the 2026-11-30 starts (INFO logs: no torch-peak breakdown); the Llama and Mixtral ones repeat in the new set
OLD_RUNS = {"deepseek-v2-lite": "held-out", "gemma-3-27b-text": "held-out", "qwen3-next-80b-a3b-fp8": "fit",
            "laguna-s-2.1-dummy": "held-out"}  # fmt: skip


@dataclass
class Run:
    name: str
    model: Path
    subset: str
    reported: Reported


def _model_dir(raw: str) -> Path:
    path = ROOT / raw
    return path if path.is_dir() else ROOT / "benchmarks/gpu/models" / Path(raw).name


def runs() -> list[Run]:
    found: list[Run] = []
    plan = (ROOT / "benchmarks/gpu/capacity-plan.txt").read_text().splitlines()
    for line in plan:
        parts = shlex.split(line.split("#")[0])
        if not parts:
            continue
        log = NEW / f"{parts[0]}.log.gz"
        if not log.exists():
            continue
        with gzip.open(log, "rt") as handle:
            text = handle.read()
        if "KV cache size" not in text:
            continue
        subset = line.rsplit("#", 1)[1].strip() if "#" in line else "held-out"
        found.append(Run(parts[0], _model_dir(parts[1]), subset, parse_log(text, str(log))))
    for name, subset in OLD_RUNS.items():
        text = (OLD / f"{name}.log").read_text(errors="replace")
        found.append(Run(f"{name} (11-30)", ROOT / "benchmarks/gpu/models" / name, subset, parse_log(text, name)))
    return found


def plan_for(run: Run):  # type: ignore[no-untyped-def]
    card = gpu("h200")
    base = PlanRequest(gpu_name=card.key, gpu_bytes=card.memory_bytes, bandwidth_gbs=card.bandwidth_gbs,
                       context=run.reported.max_model_len or 32768, concurrency=1, quant=None, kv_dtype="auto",
                       cuda_total_bytes=card.cuda_total_bytes, gpu_memory_utilization=0.92)  # fmt: skip
    assert run.reported.engine_args is not None, run.name
    req = with_engine_args(base, run.reported.engine_args, from_log=True)
    return make_plan(resolve_model(str(run.model), run.reported.engine_args.config_overrides()), req), req


def observed_peak(run: Run) -> float:
    """The profile run's torch peak: logged at DEBUG, else what the KV memory leaves of the rest."""
    r = run.reported
    if r.torch_peak_bytes is not None:
        return r.torch_peak_bytes
    requested = 0.92 * gpu("h200").cuda_total_bytes  # type: ignore[operator]
    return requested - r.available_bytes - r.weights_bytes - overhead.NON_TORCH - (r.cudagraph_bytes or 0)  # type: ignore[operator]


def _activation(run: Run) -> float:
    result, _ = plan_for(run)
    return result.overhead_parts["activation"]


def solve(run: Run, set_value, low: float = 1.0, high: float = 2.0) -> float:  # type: ignore[no-untyped-def]
    """The constant that makes the modelled peak equal the logged one: the model is linear in it
    between ``low`` and ``high`` (where the term it scales is the largest)."""
    set_value(low)
    at_low = _activation(run)
    set_value(high)
    slope = (_activation(run) - at_low) / (high - low)
    return low + (observed_peak(run) - at_low) / slope if slope else float("nan")


def fit(all_runs: list[Run]) -> None:
    by_name = {r.name: r for r in all_runs if r.subset == "fit"}
    saved = (overhead.SAMPLER_COPIES, overhead.MOE_FIXED, dict(overhead.RECURRENT_PER_ROW_STATE),
             overhead.MXFP4_EXTRA_PER_TOKEN)  # fmt: skip

    def sampler(v: float) -> None:
        overhead.SAMPLER_COPIES = v

    copies = [solve(by_name[n], sampler) for n in ("smollm2-e8k", "llama8b-e2k") if n in by_name]
    overhead.SAMPLER_COPIES = sum(copies) / len(copies)
    print(f"SAMPLER_COPIES = {overhead.SAMPLER_COPIES:.3f}   (in overhead.py: {saved[0]})")

    def moe_fixed(v: float) -> None:
        overhead.MOE_FIXED = int(v * GIB)

    overhead.MOE_FIXED = int(solve(by_name["mixtral-e8k"], moe_fixed) * GIB)
    print(f"MOE_FIXED = {overhead.MOE_FIXED / GIB:.3f} GiB   (in overhead.py: {saved[1] / GIB:.2f})")
    for family, name in (("kda", "kimi-e8k"),):  # the Mamba and GDN hybrids' peaks are V1's sampler phase

        def per_state(v: float, family: str = family) -> None:
            overhead.RECURRENT_PER_ROW_STATE[family] = v

        value = solve(by_name[name], per_state)
        overhead.RECURRENT_PER_ROW_STATE[family] = value
        print(f"RECURRENT_PER_ROW_STATE[{family!r}] = {value:.3f}   (in overhead.py: {saved[2][family]})")

    def mxfp4(v: float) -> None:
        overhead.MXFP4_EXTRA_PER_TOKEN = v

    value = solve(by_name["gptoss-e8k"], mxfp4)
    if value == value:
        overhead.MXFP4_EXTRA_PER_TOKEN = value
        print(f"MXFP4_EXTRA_PER_TOKEN = {value:.3f}   (in overhead.py: {saved[3]})")
    else:  # its forward phase is not its peak: the constant is kept, not re-derived
        overhead.MXFP4_EXTRA_PER_TOKEN = saved[3]
        print(f"MXFP4_EXTRA_PER_TOKEN: not determined (gpt-oss peaks in V1's sampler phase); kept at {saved[3]}")


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def _short(value: object, width: int = 36) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def table(all_runs: list[Run], markdown: bool) -> None:
    head = ["run", "set", "flags", "vLLM KV tokens", "servelab", "error", "weights log/plan", "peak log/plan",
            "graphs log/plan", "KV GiB log/plan"]  # fmt: skip
    rows = []
    for run in all_runs:
        result, _ = plan_for(run)
        r = run.reported
        graphs = result.overhead_parts["cudagraphs"]
        flags = " ".join(f"{k}={_short(v)}" for k, v in (r.engine_args.given() if r.engine_args else {}).items()
                         if k not in ("model", "max_model_len"))  # fmt: skip
        err = (result.capacity.tokens - r.tokens) / r.tokens * 100 if r.tokens else float("nan")
        rows.append([run.name, run.subset, flags or "-", f"{r.tokens:,}", f"{result.capacity.tokens:,}", f"{err:+.2f}%",
                     f"{_g(r.weights_bytes)} / {_g(result.weights.bytes)}",
                     f"{_g(observed_peak(run))} / {_g(result.overhead_parts['activation'])}",
                     f"{_g(r.cudagraph_bytes)} / {_g(graphs)}",
                     f"{_g(r.available_bytes)} / {_g(result.kv_pool_bytes)}"])  # fmt: skip
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    for row in rows:
        print("  ".join(row))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true", help="re-derive the constants from the fit runs first")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    all_runs = runs()
    if args.fit:
        fit(all_runs)
    table(all_runs, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
