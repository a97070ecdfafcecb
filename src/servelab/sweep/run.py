"""A sweep: each configuration started, read, measured and stopped in turn, all kept in one stored run.

For every point: the plan for its exact flags first (a point the plan says will not fit is skipped unless
``try_all``); then the engine started with its log kept, what the log says it allocated and how the start went, a
bench of the sweep's workload, and the engine stopped, whatever happened. A point that fails to start is classed
(:mod:`.failures`) and the sweep goes on. The run's result is stored after every point, so an interrupted sweep keeps
every finished point, and ``resume`` starts only the points it lacks, in the same run.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.bench import SLO
from servelab.core.errors import ServelabError, UsageError
from servelab.core.paths import servelab_home
from servelab.core.recorder import RunRecorder
from servelab.core.results import load_result
from servelab.core.results.sweep import PointFailure, SweepPoint, SweepRun
from servelab.core.store import STATUS_COMPLETE, RunStore
from servelab.engines.embedded import log_tail
from servelab.engines.manifest import build_manifest
from servelab.load import TargetSpec, resolve
from servelab.sweep.beside import Where, plan_point
from servelab.sweep.failures import READ_LINES, classify
from servelab.sweep.grid import Grid, Point
from servelab.sweep.launch import ENGINES, PointEngine, StartFailed, launch_for, point_settings
from servelab.sweep.measure import Workload, evaluate, measure
from servelab.sweep.startlog import log_size, logged, start_facts, while_measured

Say = Callable[[str], None]
EMBEDDED_PLAN = {"vllm": None, "llamacpp": "smollm2-135m", "sglang": "smollm2-135m"}  # None: the converted folder


@dataclass(frozen=True, slots=True)
class SweepOptions:
    engine: str
    grid: Grid
    model: str | None = None  # a path the engine loads; None: the embedded engine's model
    model_config: str | None = None  # what the plan reads (a preset or folder); None: the model's own
    work: Workload = field(default_factory=Workload)
    slo: SLO | None = None
    where: Where = field(default_factory=Where)
    try_all: bool = False
    port: int | None = None  # None: a free port for each point
    start_timeout_s: float = 600.0
    home: Path | None = None  # where the points' logs go (default: <servelab home>/sweep)

    def check(self) -> None:
        if self.engine not in ENGINES:
            raise UsageError(f"unknown engine {self.engine!r}", hint=", ".join(ENGINES))
        if self.model is not None and not Path(self.model).exists() and self.engine != "sglang":
            raise UsageError(
                f"--model {self.model!r}: no such file or folder",
                hint="a local model folder (vLLM) or GGUF file (llama.cpp); no --model: the embedded one",
            )


def run_sweep(
    store: RunStore, options: SweepOptions, say: Say = lambda _: None, resume: str | None = None
) -> tuple[str, SweepRun]:
    """Every point of the grid (with ``resume``: those the stored run lacks), stored as one sweep run; its id and
    result."""
    options.check()
    points = options.grid.expand()
    kept = _resumable(store, resume, points) if resume else []
    recorder = RunRecorder(store, "sweep", build_manifest("sweep", _args(options), {}), resume=resume)
    result = SweepRun(engine=options.engine, model=options.model or "the embedded engine's model",
                      planned=[p.key for p in points], points=kept,
                      slo={**options.slo.limits(), "attainment": options.slo.attainment} if options.slo else {},
                      settings=_args(options))  # fmt: skip
    recorder.result(result)
    done = {p.key for p in kept}
    try:
        for index, point in enumerate(points):
            if point.key in done:
                say(f"point {index}: {point.key}: kept from the stored run")
                continue
            result.points.append(run_point(store, options, index, point, recorder.run_id, say))
            result.points.sort(key=lambda p: p.index)
            recorder.result(result)
    except BaseException as exc:
        recorder.fail(exc)
        raise
    recorder.finish(STATUS_COMPLETE)
    return recorder.run_id, result.model_copy(update={"status": "complete"})


def _resumable(store: RunStore, run_id: str, points: list[Point]) -> list[SweepPoint]:
    """The stored run's finished points that are still in the grid, renumbered to their place in it."""
    stored = stored_sweep(store, run_id)
    where = {p.key: i for i, p in enumerate(points)}
    return [p.model_copy(update={"index": where[p.key]}) for p in stored.points if p.key in where]


def run_point(store: RunStore, options: SweepOptions, index: int, point: Point, run_id: str, say: Say) -> SweepPoint:
    """One point: planned, started, read, measured and stopped; a failure to start is classed, never raised."""
    home = options.home or servelab_home() / "sweep"
    embedded = _embedded_model(options) if options.model is None else None
    launch = launch_for(options.engine, point, options.model, embedded)
    plan = plan_point(options.engine, options.model_config or _plan_model(options, embedded), launch.args,
                      launch.env, options.where)  # fmt: skip
    port = options.port or free_port()
    settings = point_settings(home, f"{run_id}/point-{index}", port, options.start_timeout_s)
    base = SweepPoint(index=index, key=point.key, args=list(point.args), env=point.env_dict(),
                      command=launch.command_line(settings.host, port), status="skipped", plan=plan)  # fmt: skip
    if plan.fits is False and not options.try_all:
        say(f"point {index}: {point.key}: skipped, the plan says it does not fit ({plan.verdict})")
        why = f"the plan says it does not fit: {plan.verdict} (--try-all starts it anyway)"
        return base.model_copy(update={"skipped": why})
    engine = PointEngine(launch, settings)
    engine.down()  # an engine a killed sweep left behind
    say(f"point {index}: {point.key}: starting {engine.label} on port {port}; log {settings.log_path}")
    started = time.monotonic()
    try:
        engine.up()
    except StartFailed as exc:
        return _not_started(base, exc, settings.log_path, options, say)
    try:
        start = start_facts(settings.log_path, time.monotonic() - started)
        said = logged(settings.log_path, options.engine)
        say(f"point {index}: up in {start.seconds:.0f} s ({start.cache}); KV cache {said.kv_tokens} tokens logged, "
            f"{plan.kv_tokens} planned")  # fmt: skip
        return _measured(store, options, base.model_copy(update={"start": start, "logged": said}), settings.url, say)
    finally:
        engine.down()


def _not_started(base: SweepPoint, exc: StartFailed, log: Path, options: SweepOptions, say: Say) -> SweepPoint:
    tail = log_tail(log, READ_LINES).splitlines()
    failure = classify(exc.returncode, tail, exc.timed_out, options.start_timeout_s)
    say(f"point {base.index}: {failure.kind}: {failure.reason}")
    update = {"status": "failed", "failure": failure, "start": start_facts(log, None),
              "logged": logged(log, options.engine)}  # fmt: skip
    return base.model_copy(update=update)


def _measured(store: RunStore, options: SweepOptions, base: SweepPoint, url: str, say: Say) -> SweepPoint:
    log = Path(base.start.log) if base.start and base.start.log else None
    mark = log_size(log) if log else 0
    try:
        target = resolve(TargetSpec(f"point-{base.index}", url))
        bench_run, figures = measure(store, target, options.work, options.slo)
        eval_run, evals = evaluate(store, target, options.work.evals) if options.work.evals else (None, [])
    except (ServelabError, OSError, RuntimeError) as exc:  # the point's engine is up, but its measurement failed
        say(f"point {base.index}: measurement failed: {exc}")
        failure = PointFailure(kind="measurement failed", reason=str(exc))
        return base.model_copy(update={"status": "failed", "failure": failure})
    said = while_measured(log, mark) if log else []
    for line in said:
        say(f"point {base.index}: {line}")
    update = {"status": "measured", "bench_run": bench_run, "figures": figures, "eval_run": eval_run, "evals": evals,
              "while_measured": said}  # fmt: skip
    return base.model_copy(update=update)


def _embedded_model(options: SweepOptions) -> Path:
    if options.engine == "llamacpp":
        from servelab.engines.convert_gguf import find_gguf

        return find_gguf()
    from servelab.engines.embedded import EmbeddedEngine

    return EmbeddedEngine().ensure_model()


def _plan_model(options: SweepOptions, embedded: Path | None) -> str:
    """What the plan reads: the model folder itself, else the embedded model's own (its folder, or the preset of
    the GGUF's model)."""
    if options.model is not None:
        return options.model
    return EMBEDDED_PLAN[options.engine] or str(embedded)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _args(options: SweepOptions) -> dict[str, Any]:
    """The sweep's settings as stored (what a resume starts the rest with)."""
    return {
        "engine": options.engine,
        "model": options.model,
        "model_config": options.model_config,
        "axes": [{"name": a.name, "values": list(a.values), "kind": a.kind} for a in options.grid.axes],
        "points": [{"args": list(p.args), "env": dict(p.env)} for p in options.grid.points],
        "scenarios": list(options.work.scenarios),
        "concurrency": list(options.work.concurrency),
        "requests": options.work.requests,
        "max_tokens": options.work.max_tokens,
        "evals": list(options.work.evals),
        "sessions": list(options.work.sessions) if options.work.sessions else None,
        "temperature": options.work.temperature,
        "slo": options.slo.limits() | {"attainment": options.slo.attainment} if options.slo else None,
        "slo_turns": options.slo.turns if options.slo else "all",
        "gpu": options.where.gpu,
        "alongside": options.where.alongside,
        "headroom": options.where.headroom,
        "try_all": options.try_all,
        "port": options.port,
        "start_timeout_s": options.start_timeout_s,
    }


def stored_sweep(store: RunStore, run_id: str) -> SweepRun:
    """The stored sweep ``run_id`` names (an id, a prefix or ``latest``: the newest sweep)."""
    info = store.get_run(run_id, kinds=("sweep",))
    stored = load_result(store, info)
    if not isinstance(stored, SweepRun):
        raise UsageError(f"run {info.run_id} holds no sweep result", hint="servelab runs list")
    return stored


def stored_options(store: RunStore, run_id: str) -> SweepOptions:
    """The options a stored sweep ran with (what ``--resume`` goes on with)."""
    from servelab.sweep.grid import Axis

    s = stored_sweep(store, run_id).settings
    axes = tuple(Axis(a["name"], tuple(a["values"]), a["kind"]) for a in s["axes"])
    points = tuple(Point(tuple(p["args"]), tuple(sorted(p["env"].items()))) for p in s["points"])
    slo = s.get("slo")
    return SweepOptions(
        engine=s["engine"],
        grid=Grid(axes, points),
        model=s.get("model"),
        model_config=s.get("model_config"),
        work=Workload(
            tuple(s["scenarios"]),
            tuple(s["concurrency"]),
            s["requests"],
            s.get("max_tokens"),
            tuple(s.get("evals") or ()),
            tuple(s["sessions"]) if s.get("sessions") else None,
            float(s.get("temperature") or 0.0),
        ),
        slo=SLO(
            ttft_ms=slo.get("ttft_ms"),
            tpot_ms=slo.get("tpot_ms"),
            e2e_ms=slo.get("e2e_ms"),
            itl_ms=slo.get("itl_ms"),
            attainment=slo.get("attainment", 0.9),
            turns="warm" if s.get("slo_turns") == "warm" else "all",
        )
        if slo
        else None,
        where=Where(s.get("gpu"), dict(s.get("alongside") or {}), int(s.get("headroom") or 0)),
        try_all=bool(s.get("try_all")),
        port=s.get("port"),
        start_timeout_s=float(s.get("start_timeout_s", 600.0)),
    )
