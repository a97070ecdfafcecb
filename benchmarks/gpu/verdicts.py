"""Judge the servelab steps of H200 bench-at-scale runs again from the evidence each stored with its verdict.

For each DIR (one API-server count: its NAME.json files from bench_scale.py), every servelab step's stored evidence
goes through the current rules (servelab.bench.verdict.judge) and is printed beside the verdict it got then. Evidence
that an older servelab did not store (the engine-held share, the closed loop's occupancy) can be added from a
rejudge.py output (--extra FILE.jsonl: its api, step, held and occupancy per line). A step confirmed in its run
(CONFIRM=1: the stored verdict's ``relieved``) has that confirmation applied again to a client verdict.

--remote judges as if the server ran on another host: the frontend CPU measured here through /proc is dropped, and
the server's own process_cpu_seconds_total (vLLM publishes it for its one API server), where the step kept it, is
the frontend's CPU. With --counter too, a one-API-server run that did not keep it (stored before it was scraped)
has its /proc figure stand in for it.

usage: PYTHONPATH=src python benchmarks/gpu/verdicts.py [--extra FILE.jsonl] [--remote [--counter]] DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from servelab.bench.confirm import with_relief
from servelab.bench.evidence import frontend_evidence
from servelab.bench.verdict import client_note, judge
from servelab.core.results import Relieved


def _extra(path: str | None) -> dict[tuple[str, str], dict[str, float]]:
    if not path:
        return {}
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return {(r["api"], r["step"]): {"engine_held_share": r["held"], "client_occupancy": r["occupancy"]} for r in rows}


HOST_CPU = ("frontend_cpu_max", "frontend_cpu_mean", "frontend_processes", "frontend_cpu_from", "frontend_cpu_host_max")


def as_remote(ev: dict[str, object], api: str, counter: bool) -> dict[str, object]:
    """The evidence without what /proc showed of the server here: the server's own CPU counter where the step kept
    it (``frontend_cpu_reported``), else, with ``counter``, a one-API-server run's /proc figure standing in for it."""
    out = {k: v for k, v in ev.items() if k not in HOST_CPU}
    reported = ev.get("frontend_cpu_reported")
    if counter and api == "1" and not isinstance(reported, float):
        reported = ev.get("frontend_cpu_max")
    out.update(frontend_evidence((), reported if isinstance(reported, float) else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--extra", help="rejudge.py's JSON lines: held share and occupancy per step")
    ap.add_argument("--remote", action="store_true", help="as if the server ran on another host")
    ap.add_argument("--counter", action="store_true", help="with --remote: the server's own CPU counter")
    args = ap.parse_args()
    extra = _extra(args.extra)
    print("| API servers | step | tool's tok/s | verdict then | verdict now | near its limit too |")
    print("|---|---|---|---|---|---|")
    for folder in map(Path, args.dirs):
        api = (folder / "api-servers").read_text().strip()
        steps = [p for p in folder.glob("servelab-x*-c*.json") if not p.name.endswith(".engine.json")]
        for path in sorted(steps, key=lambda p: (int(p.stem.split("-c")[-1]), p.stem)):
            stored = json.loads(path.read_text())
            then = stored["bottleneck"]
            ev = {**then["evidence"], **extra.get((api, path.stem), {})}
            if args.remote:
                ev = as_remote(ev, api, args.counter)
            now = judge(ev, client_note(ev, open_loop=False))
            if then.get("relieved") and now.limit == "client":  # the step's confirmation (CONFIRM=1) decides again
                now = with_relief(now, Relieved.model_validate(then["relieved"]), open_loop=False)
            print(f"| {api} | {path.stem} | {stored['tok_s']:,.0f} | {then['limit']} | {now.limit} | "
                  f"{', '.join(now.near) or '-'} |")  # fmt: skip


if __name__ == "__main__":
    main()
