"""The cost of an exact count: the gateway's in-process count (the engine's own tokenizer and chat template) of a
short chat, an 8K- and a 32K-token chat, beside the engine's own /tokenize round trip for the same chat (the
peer: what a gateway without the tokenizer in process pays), medians over rounds, and their ratio.

usage: python benchmarks/gateway/count.py [--engine http://127.0.0.1:8765 | none] [--model-folder DIR] [--rounds 30]
(``--engine none``: the in-process column alone, on a host with no engine)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from servelab.core.paths import servelab_home
from servelab.gateway.admission import CHAT, TokenCounter

SIZES = {"short (1 turn)": 0, "8K tokens": 8000, "32K tokens": 32000}
BOUND_MAX = 1024  # the gateway's default policy.bound_tokens_max


def chat(counter: TokenCounter, tokens: int) -> dict[str, Any]:
    """A code-and-prose user turn grown until the tokenizer says ``tokens`` (a short question when 0)."""
    if not tokens:
        return {"model": "m", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    unit = "def area(r):\n    return 3.14159 * r * r  # the circle's area, in square units\n"
    per = len(counter.tokenizer.encode(unit).ids)
    return {"model": "m", "messages": [{"role": "user", "content": unit * (tokens // per + 1)}]}


def median_ms(work: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="http://127.0.0.1:8765", help="the engine whose /tokenize is the peer")
    ap.add_argument("--model-folder", default=str(servelab_home() / "models" / "smollm2-135m-instruct"))
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    counter = TokenCounter.from_folder(Path(args.model_folder))
    print(f"{'chat':<16} {'tokens':>7} {'method':>7} {'in process ms':>14} {'/tokenize ms':>13} {'ratio':>7}")
    with httpx.Client(base_url=args.engine if args.engine != "none" else "http://none", timeout=60) as http:
        for label, size in SIZES.items():
            body = chat(counter, size)
            counted = counter.count(CHAT, body, BOUND_MAX)
            local = median_ms(lambda b=body: counter.count(CHAT, b, BOUND_MAX), args.rounds)
            remote = _round_trip(http, body, args.rounds) if args.engine != "none" else float("nan")
            print(f"{label:<16} {counted.tokens:>7,} {counted.method:>7} {local:>14.3f} {remote:>13.3f} "
                  f"{local / remote:>6.2f}x")  # fmt: skip


def _round_trip(http: httpx.Client, body: dict[str, Any], rounds: int) -> float:
    payload = {"model": http.get("/v1/models").json()["data"][0]["id"], "messages": body["messages"]}
    return median_ms(lambda: http.post("/tokenize", json=payload).raise_for_status(), rounds)


if __name__ == "__main__":
    main()
