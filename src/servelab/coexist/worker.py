"""The realtime stand-in, run in its own process: a small transformer decoding one token at a time, as a streaming
TTS decoder does, emitting a chunk of audio every ``steps_per_chunk`` steps (or, in frames mode, an avatar-like
frame at a fixed rate). Utterances start on an open-loop schedule, so a late one is measured from when it was due.

Commands on stdin, one per line: ``run N`` (N utterances, one JSON line each on stdout, then ``{"done": N}``) and
``quit``. The first line on stdout is ``{"ready": {...}}`` with what the probe is. Times are ``perf_counter``
seconds (CLOCK_MONOTONIC: the same clock in every process of this host).

    python -m servelab.coexist.worker --device cpu|cuda [--dim 1024 --layers 28 ...]

With ``--stack-file PATH``, SIGUSR1 writes every thread's Python stack there (faulthandler): a probe that stops
answering can be asked where it is, even inside a C call.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from servelab.load.arrivals import OpenLoop


def _numpy_model(dim: int, layers: int, ffn: int, context: int) -> tuple[Callable[[int], None], dict[str, Any]]:
    """A pre-norm-free decoder stack in numpy: per step, per layer, qkv, attention over a fixed KV window, output
    projection and a two-matrix MLP."""
    rng = np.random.default_rng(0)
    scale = 1 / math.sqrt(dim)
    w = [
        (
            rng.standard_normal((dim, 3 * dim), dtype=np.float32) * scale,
            rng.standard_normal((dim, dim), dtype=np.float32) * scale,
            rng.standard_normal((dim, ffn), dtype=np.float32) * scale,
            rng.standard_normal((ffn, dim), dtype=np.float32) / math.sqrt(ffn),
        )
        for _ in range(layers)
    ]
    kv = np.zeros((layers, 2, context, dim), dtype=np.float32)
    x = rng.standard_normal(dim, dtype=np.float32)

    def step(pos: int) -> None:
        nonlocal x
        h = x
        slot = pos % context
        for i, (wqkv, wo, w1, w2) in enumerate(w):
            q, k, v = np.split(h @ wqkv, 3)
            kv[i, 0, slot], kv[i, 1, slot] = k, v
            att = kv[i, 0] @ q * scale
            att = np.exp(att - att.max())
            h = h + (att / att.sum()) @ kv[i, 1] @ wo
            h = h + np.maximum(h @ w1, 0) @ w2
            h = h / (np.linalg.norm(h) / math.sqrt(dim) + 1e-6)
        x = h

    params = layers * (4 * dim * dim + 2 * dim * ffn)
    return step, {"backend": "numpy", "params": params}


def _torch_model(
    dim: int, layers: int, ffn: int, context: int, device: str, graph: bool
) -> tuple[Callable[[int], None], dict[str, Any]]:
    """The same stack in torch (bf16 on CUDA), captured as one CUDA graph per step when asked: a few hundred small
    kernels per step, latency-bound as a real streaming decoder is."""
    import torch

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)
    scale = 1 / math.sqrt(dim)

    def mat(a: int, b: int, s: float) -> Any:
        return (torch.randn(a, b, generator=gen) * s).to(device=device, dtype=dtype)

    w = [
        (mat(dim, 3 * dim, scale), mat(dim, dim, scale), mat(dim, ffn, scale), mat(ffn, dim, ffn**-0.5))
        for _ in range(layers)
    ]
    kv = torch.zeros(layers, 2, context, dim, device=device, dtype=dtype)
    x = torch.randn(1, dim, generator=gen).to(device=device, dtype=dtype)
    slot = torch.zeros(1, dtype=torch.long, device=device)

    def body() -> None:
        h = x
        for i, (wqkv, wo, w1, w2) in enumerate(w):
            q, k, v = (h @ wqkv).chunk(3, dim=-1)
            kv[i, 0].index_copy_(0, slot, k)
            kv[i, 1].index_copy_(0, slot, v)
            att = torch.softmax((q @ kv[i, 0].T) * scale, dim=-1)
            h = h + (att @ kv[i, 1]) @ wo
            h = h + torch.relu(h @ w1) @ w2
            h = h * torch.rsqrt(h.float().pow(2).mean() + 1e-6).to(dtype)
        x.copy_(h)

    run = body
    if graph and device.startswith("cuda"):
        cuda: Any = torch.cuda  # typed loosely: torch's stubs differ between its CPU and CUDA builds
        stream = cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                body()
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        run = g.replay

    def step(pos: int) -> None:
        slot.fill_(pos % context)
        run()

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    params = layers * (4 * dim * dim + 2 * dim * ffn)
    info = {"backend": "torch", "device": device, "dtype": str(dtype), "cuda_graph": run is not body, "params": params}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
    step.sync = sync  # type: ignore[attr-defined]
    return step, info


Step = Callable[[int], None]


def _utterance(step: Step, sync: Callable[[], None], args: argparse.Namespace, due: float) -> dict[str, Any]:
    """One utterance (or, in frames mode, one second of frames), started when due or at once if late."""
    now = time.perf_counter()
    if due > now:
        time.sleep(due - now)
    chunks: list[list[float]] = []
    if args.mode == "frames":
        period = 1 / args.fps
        for f in range(args.fps):
            frame_due = due + f * period
            if frame_due > time.perf_counter():
                time.sleep(frame_due - time.perf_counter())
            for s in range(args.steps_per_chunk):
                step(s)
            sync()
            chunks.append([time.perf_counter(), period, frame_due])
        return {"scheduled": due, "chunks": chunks}
    pos = 0
    for _ in range(args.chunks):
        for _ in range(args.steps_per_chunk):
            step(pos)
            pos += 1
        sync()
        chunks.append([time.perf_counter(), args.chunk_ms / 1000])
    return {"scheduled": due, "chunks": chunks}


def _green_context(sms: int) -> dict[str, Any]:
    """Confine this process's kernels to ``sms`` SMs with a CUDA green context, where torch and the driver offer it."""
    try:
        from torch.cuda.green_contexts import GreenContext

        context: Any = GreenContext.create(num_sms=sms)
        context.set_context()
        return {"green_context_sms": sms}
    except Exception as exc:  # no green contexts in this torch or driver: say so, run unpartitioned
        return {"green_context_error": f"{type(exc).__name__}: {exc}"}


def _stack_on_signal(path: str) -> None:
    """SIGUSR1 dumps every thread's stack into ``path`` (the file stays open for the process's life)."""
    faulthandler.register(signal.SIGUSR1, file=open(path, "w"), all_threads=True)  # noqa: SIM115


def serve(args: argparse.Namespace) -> None:
    if args.stack_file:
        _stack_on_signal(args.stack_file)
    green = _green_context(args.green_sms) if args.green_sms else {}
    if args.device == "cpu" and args.backend == "numpy":
        step, info = _numpy_model(args.dim, args.layers, args.ffn, args.context)
        sync: Callable[[], None] = lambda: None  # noqa: E731
    else:
        step, info = _torch_model(args.dim, args.layers, args.ffn, args.context, args.device, not args.no_graph)
        sync = step.sync  # type: ignore[attr-defined]
    for i in range(args.steps_per_chunk * 2):  # warm caches and clocks
        step(i)
    sync()
    info.update(green)
    info["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS", "the library's default")
    info.update(mode=args.mode, steps_per_chunk=args.steps_per_chunk, chunk_ms=args.chunk_ms, chunks=args.chunks)
    _emit({"ready": info})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            return
        count = int(cmd[1])
        audio_s = args.chunks * args.chunk_ms / 1000 if args.mode == "voice" else 1.0
        period = args.period_ms / 1000 if args.period_ms else audio_s + args.pause_ms / 1000
        start = time.perf_counter() + 0.05
        for _, offset in zip(range(count), OpenLoop(1 / period, poisson=False).offsets(), strict=False):
            _emit(_utterance(step, sync, args, start + offset))
        _emit({"done": count})


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m servelab.coexist.worker")
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="numpy", choices=["numpy", "torch"])
    p.add_argument("--mode", default="voice", choices=["voice", "frames"])
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--ffn", type=int, default=3072)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--steps-per-chunk", type=int, default=2)
    p.add_argument("--chunk-ms", type=float, default=40.0)
    p.add_argument("--chunks", type=int, default=50, help="chunks per utterance")
    p.add_argument("--pause-ms", type=float, default=300.0, help="silence between scheduled utterances")
    p.add_argument("--period-ms", type=float, default=0.0, help="utterances due this often (default: audio + pause)")
    p.add_argument("--fps", type=int, default=25, help="frames mode: frames per second")
    p.add_argument("--no-graph", action="store_true")
    p.add_argument("--green-sms", type=int, default=0, help="run in a CUDA green context of this many SMs")
    p.add_argument("--stack-file", help="SIGUSR1 writes every thread's stack here")
    return p


if __name__ == "__main__":
    serve(parser().parse_args())
