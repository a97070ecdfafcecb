"""Two stored bench runs side by side: the same kind of run or none, the settings that differ said, a server that
was busy with other clients in either said, and the targets renamed RUN:TARGET so the table shows both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servelab.bench.compare import side_by_side
from servelab.core.errors import UsageError
from servelab.core.records import RequestRecord
from servelab.core.results import BenchRun, Row, load_result
from servelab.core.store import RunInfo, RunStore

BENCH_KINDS = ("bench", "bench-slo")
BUSY = "other clients"  # the words of a bench warning that the server ran more than the run sent


@dataclass
class RunComparison:
    first: str
    second: str
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def compare_runs(store: RunStore, run_a: str, run_b: str) -> RunComparison:
    infos = [store.get_run(run_a, kinds=BENCH_KINDS), store.get_run(run_b, kinds=BENCH_KINDS)]
    for info in infos:
        if info.kind not in BENCH_KINDS:
            raise UsageError(f"compare takes two bench runs; {info.run_id} is a {info.kind} run")
    if infos[0].kind != infos[1].kind:
        raise UsageError(f"{infos[0].run_id} is a {infos[0].kind} run and {infos[1].run_id} a {infos[1].kind} run")
    records: list[RequestRecord] = []
    for info in infos:
        for r in store.records(info.run_id):
            r.target = f"{info.run_id[-6:]}:{r.target}"
            records.append(r)
    out = RunComparison(infos[0].run_id, infos[1].run_id, side_by_side(records))
    out.warnings += settings_differ(infos[0], infos[1])
    for info in infos:
        result = load_result(store, info)
        busy = [w for w in result.warnings if BUSY in w] if isinstance(result, BenchRun) else []
        out.warnings += [f"{info.run_id}: {w}" for w in busy]
    return out


def settings_differ(a: RunInfo, b: RunInfo) -> list[str]:
    """What the two runs were asked to do differently (the load, the arguments), one line each."""
    first, second = _settings(a.manifest), _settings(b.manifest)
    keys = [k for k in dict.fromkeys([*first, *second]) if first.get(k) != second.get(k)]
    return [f"the runs differ in {k}: {_text(first.get(k))} vs {_text(second.get(k))}" for k in keys]


def _settings(manifest: dict[str, Any]) -> dict[str, Any]:
    load, args = manifest.get("load"), manifest.get("args")
    load, args = (load if isinstance(load, dict) else {}), (args if isinstance(args, dict) else {})
    skip = {"targets", "seed"}
    return {**{k: v for k, v in args.items() if k not in skip}, **{k: v for k, v in load.items() if k not in skip}}


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "none"
    return "unset" if value is None else str(value)
