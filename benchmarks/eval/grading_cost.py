"""What grading one repo-repair attempt costs: the bundled task (inventory) with its reference fix, graded by
``grade_workdir`` under bubblewrap N times in a row, here and by a named peer (an older servelab checkout, run in a
subprocess with its own ``src`` first on the path), alternating, each pair back to back.

    python benchmarks/eval/grading_cost.py --peer /path/to/old/checkout [--rounds 8]

Prints each side's median and the ratio (this checkout / the peer). Needs bubblewrap (``make test`` installs it)."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ONE = """
import json, shutil, sys, time
from pathlib import Path
from servelab.eval.repair import load_task
from servelab.eval.repair.grader import grade_workdir
from servelab.eval.sandbox import fresh_copy, give_to_sandbox
task = load_task("inventory")
out = []
for _ in range(int(sys.argv[1])):
    work = fresh_copy(task.repo)
    for path in (task.root / "reference").rglob("*.py"):
        (work / path.relative_to(task.root / "reference")).write_bytes(path.read_bytes())
    give_to_sandbox(work)
    start = time.perf_counter()
    grade = grade_workdir(task, work, "bwrap")
    out.append(time.perf_counter() - start)
    shutil.rmtree(work, ignore_errors=True)
    assert grade.resolved, grade.to_dict(task)
print(json.dumps(out))
"""


def timings(src: Path, count: int) -> list[float]:
    """``count`` gradings in a fresh process of the checkout whose ``src`` is given (the first is a warm-up)."""
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    done = subprocess.run([sys.executable, "-c", ONE, str(count + 1)], capture_output=True, text=True, check=True,
                          env=env, timeout=1800)  # fmt: skip
    return list(json.loads(done.stdout.strip().splitlines()[-1]))[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="an older servelab checkout (its src/ is used)")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bubblewrap is needed (make test installs it)")
    here = Path(__file__).resolve().parents[2] / "src"
    mine: list[float] = []
    peer: list[float] = []
    started = time.perf_counter()
    for _ in range(2):  # alternate: the two sides see the same machine
        mine += timings(here, args.rounds // 2)
        peer += timings(Path(args.peer).resolve() / "src", args.rounds // 2)
    a, b = statistics.median(mine), statistics.median(peer)
    print(f"this checkout: {_said(mine)}")
    print(f"peer {args.peer}: {_said(peer)}")
    print(f"ratio (this / peer): {a / b:.2f}   [{time.perf_counter() - started:.0f} s]")


def _said(took: list[float]) -> str:
    low, high = min(took) * 1000, max(took) * 1000
    return f"median {statistics.median(took) * 1000:.0f} ms over {len(took)} gradings ({low:.0f}-{high:.0f})"


if __name__ == "__main__":
    main()
