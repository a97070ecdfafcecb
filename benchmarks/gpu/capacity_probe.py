"""On the GPU host: start vLLM (dummy weights) once per run, keep its start-up log up to the KV-cache lines, stop it.

Each run is one line of a plan file: ``NAME MODEL_DIR [vllm serve flags...]``. vLLM logs at DEBUG so the memory
profile's breakdown (weights, torch peak increase, non-torch increase, CUDA-graph estimate) is kept. The server
is killed as soon as it has logged "Maximum concurrency" (the figures are decided by then), which saves the
CUDA-graph capture and the API server start. Stdlib only. Results: OUT/NAME.log.gz and one JSON line per run
in OUT/runs.jsonl. Used by docs/plan-calibration.md.

usage: capacity_probe.py --plan FILE --out DIR [--budget-s 540] [--tokenizer DIR] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

DONE = "Maximum concurrency for"
FAILED = ("Traceback (most recent call last)", "EngineCore failed to start", "Engine core initialization failed")


def gpu_used_mib() -> int:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return int(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return -1


def wait_gpu_free(limit_s: float = 40) -> None:
    end = time.time() + limit_s
    while time.time() < end:
        used = gpu_used_mib()
        if 0 <= used < 1024:
            return
        time.sleep(0.5)


def one_run(name: str, model: str, flags: list[str], out: Path, tokenizer: str, timeout_s: float) -> dict:
    env = dict(
        os.environ,
        VLLM_LOGGING_LEVEL="DEBUG",
        VLLM_USE_FLASHINFER_SAMPLER="0",
        VLLM_NO_USAGE_STATS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_USE_DEEP_GEMM="0",
    )
    for item in flags[:]:
        if item.startswith("ENV:"):
            key, _, value = item[4:].partition("=")
            env[key] = value
            flags.remove(item)
    log_path = out / f"{name}.log"
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        "--load-format",
        "dummy",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tokenizer",
        tokenizer,
        *flags,
    ]
    t0 = time.time()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        status = "timeout"
        while time.time() - t0 < timeout_s:
            time.sleep(0.5)
            text = log_path.read_text(errors="replace")
            if DONE in text:
                status = "ok"
                break
            if proc.poll() is not None:
                status = f"exited {proc.returncode}"
                break
        elapsed = time.time() - t0
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    wait_gpu_free()
    text = log_path.read_text(errors="replace")
    if status != "ok" and any(marker in text for marker in FAILED):
        status += " (traceback)"
    keep = [
        line
        for line in text.splitlines()
        if any(
            k in line
            for k in (
                "Model loading took",
                "Available KV cache memory",
                "KV cache size",
                "Maximum concurrency",
                "Memory profiling takes",
                "CUDA graph memory",
                "Setting attention block size",
                "Padding mamba",
                "Initial free memory",
                "Free memory after profiling",
                "padding layers",
                "Error",
                "error",
            )
        )
    ]
    with gzip.open(out / f"{name}.log.gz", "wt") as handle:
        handle.write(text)
    log_path.unlink()
    return {
        "name": name,
        "model": model,
        "flags": flags,
        "status": status,
        "seconds": round(elapsed, 1),
        "lines": [line[-400:] for line in keep][-20:],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--timeout-s", type=float, default=240)
    ap.add_argument("--tokenizer", default=".gpu-kit/models/smollm2-135m")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    start = time.time()
    for raw in Path(args.plan).read_text().splitlines():
        parts = shlex.split(raw, comments=True)
        if not parts or (only and parts[0] not in only):
            continue
        left = args.budget_s - (time.time() - start)
        if left < 45:
            print(f"skipped {parts[0]}: budget spent", flush=True)
            continue
        result = one_run(parts[0], parts[1], parts[2:], out, args.tokenizer, min(args.timeout_s, left - 5))
        with (out / "runs.jsonl").open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(json.dumps({k: result[k] for k in ("name", "status", "seconds")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
