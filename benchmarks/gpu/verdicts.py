"""Judge the servelab steps of H200 bench-at-scale runs again from the evidence each stored with its verdict.

For each DIR (one API-server count: its NAME.json files from bench_scale.py), every servelab step's stored evidence
goes through the current rules (servelab.bench.verdict.judge) and is printed beside the verdict it got then. Evidence
that an older servelab did not store (the engine-held share, the closed loop's occupancy) can be added from a
rejudge.py output (--extra FILE.jsonl: its api, step, held and occupancy per line).

--remote judges as if the server ran on another host: the frontend CPU measured here through /proc is dropped. With
--counter too, a one-API-server run's /proc figure stands in for the server's own process_cpu_seconds_total (vLLM
publishes it for its one API server; the runs stored before it was scraped did not keep it).

usage: PYTHONPATH=src python benchmarks/gpu/verdicts.py [--extra FILE.jsonl] [--remote [--counter]] DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from servelab.bench.verdict import client_note, judge


def _extra(path: str | None) -> dict[tuple[str, str], dict[str, float]]:
    if not path:
        return {}
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return {(r["api"], r["step"]): {"engine_held_share": r["held"], "client_occupancy": r["occupancy"]} for r in rows}


HOST_CPU = ("frontend_cpu_max", "frontend_cpu_mean", "frontend_processes", "frontend_cpu_from")


def as_remote(ev: dict[str, object], api: str, counter: bool) -> dict[str, object]:
    """The evidence without what /proc showed of the server here; with ``counter``, a one-API-server run's figure
    as the server's own CPU counter."""
    out = {k: v for k, v in ev.items() if k not in HOST_CPU}
    if counter and api == "1" and isinstance(cpu := ev.get("frontend_cpu_max"), float):
        out.update(frontend_cpu_from="server", frontend_processes=1, frontend_cpu_max=cpu, frontend_cpu_mean=cpu)
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
            print(f"| {api} | {path.stem} | {stored['tok_s']:,.0f} | {then['limit']} | {now.limit} | "
                  f"{', '.join(now.near) or '-'} |")  # fmt: skip


if __name__ == "__main__":
    main()
