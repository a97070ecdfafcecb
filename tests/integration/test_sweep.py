"""`servelab sweep` on this machine: the embedded vLLM at two --max-num-batched-tokens (and one value vLLM refuses)
and llama.cpp's llama-server at two -np, each started and stopped by servelab, the plan's KV capacity beside the
logged one at every point, the refused point classed and the sweep going on; a llama.cpp sweep stopped by SIGTERM
after its first point, then resumed in the same run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from servelab.core.results import load_result
from servelab.core.results.sweep import SweepRun
from servelab.core.store import RunStore
from servelab.engines.embedded import pid_alive, port_free
from servelab.engines.local_server import listening_pids
from servelab.sweep import SweepOptions, Workload, make_grid, run_sweep
from servelab.testing import free_port

WORK = Workload(("code-chat",), (1,), requests=3, max_tokens=16)


def test_a_vllm_sweep_sets_the_plan_beside_the_log_and_classes_a_refused_flag(tmp_path: Path) -> None:
    port = free_port()
    options = SweepOptions(engine="vllm", grid=make_grid(["--max-num-batched-tokens 0,512,1024"], []), work=WORK,
                           port=port, start_timeout_s=400, home=tmp_path / "sweep")  # fmt: skip
    with RunStore(tmp_path / "runs.sqlite") as store:
        _, result = run_sweep(store, options)
    refused, *started = result.points
    assert refused.status == "failed" and refused.failure is not None
    assert refused.failure.kind == "flag refused" and "max_num_batched_tokens" in refused.failure.reason
    for point in started:
        assert point.status == "measured", point.failure
        assert point.plan is not None and point.logged is not None and point.logged.kv_tokens is not None
        assert point.plan.kv_tokens == point.logged.kv_tokens  # vLLM CPU 0.32 logged 93,184 for 2 GiB
        assert point.start is not None and point.start.seconds and point.start.cache in ("cold", "cached")
        assert point.figures and point.figures[0].ok == 3 and point.bench_run
        assert "--max-num-batched-tokens" in point.command and Path(point.start.log).is_file()
    assert port_free("127.0.0.1", port), "an engine of the sweep is still up"


def _sweep_cli(store: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "servelab.cli.main", "sweep", "--store", str(store), "--json", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stored(store_path: Path) -> SweepRun | None:
    with RunStore(store_path) as store:
        runs = [r for r in store.list_runs() if r.kind == "sweep"]
        result = load_result(store, runs[0]) if runs else None
    return result if isinstance(result, SweepRun) else None


def test_a_llamacpp_sweep_stopped_after_its_first_point_resumes_in_the_same_run(tmp_path: Path) -> None:
    store, port = tmp_path / "runs.sqlite", free_port()
    proc = _sweep_cli(store, "--engine", "llamacpp", "--grid", "-np 1,2", "--requests", "3", "--max-tokens", "16",
                      "--eval", "quick", "--port", str(port), "--start-timeout", "120")  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            found = _stored(store) if store.exists() else None
            if found is not None and found.points:
                break
            time.sleep(0.2)
        engines = listening_pids(port)  # the second point's engine, if it is up by now
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    first = _stored(store)
    assert first is not None and first.status == "interrupted" and [p.key for p in first.points] == ["-np 1"]
    assert port_free("127.0.0.1", port) and not any(pid_alive(p) for p in engines), "llama-server left running"
    with RunStore(store) as db:
        run_id = next(r.run_id for r in db.list_runs() if r.kind == "sweep")
    resumed = _sweep_cli(store, "--resume", run_id)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert json.loads(out)["run_id"] == run_id
    done = _stored(store)
    assert done is not None and done.status == "complete"
    assert [(p.key, p.status) for p in done.points] == [("-np 1", "measured"), ("-np 2", "measured")]
    assert done.points[0] == first.points[0]  # kept as measured, not started again
    for point in done.points:
        assert point.plan is not None and point.logged is not None
        assert point.plan.kv_tokens == point.logged.kv_tokens  # 8,192 and 16,384: each slot the model's context
        assert point.eval_run is not None and [(e.suite, e.n) for e in point.evals] == [("quick", 6)]  # resumed too
    assert port_free("127.0.0.1", port)
