"""`servelab check` end to end against the embedded engine: every step stored, one report; and a target that
dies mid-bench still gives a report that says what failed."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from servelab.bench import resolve_targets
from servelab.check.full import CheckOptions, failure_notes, report_runs, run_check
from servelab.cli import main
from servelab.core.results import BenchRun, CheckRun, load_result
from servelab.core.store import RunStore
from servelab.engines.embedded import EmbeddedEngine, EngineState
from servelab.report import write_report
from tests.integration.test_gateway_faults import Forwarder

pytestmark = pytest.mark.integration


def test_check_runs_every_step_and_writes_a_report(
    engine: EngineState, engine_handle: EmbeddedEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, report = tmp_path / "runs.sqlite", tmp_path / "report.html"
    argv = ["check", "--target", f"embedded={engine.url}", "--model-config", str(engine_handle.settings.model_dir),
            "--gpu", "h100-80gb"]  # fmt: skip
    code = main([*argv, "--max-tokens", "8", "--store", str(store), "--out", str(report)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"report: {report.resolve()}" in printed.replace("\n", "")
    with RunStore(store) as db:
        runs = {r.kind: r for r in db.list_runs()}
        bench_records = db.records(runs["bench"].run_id)
        check = load_result(db, runs["check"])
    assert set(runs) == {"check", "plan", "bench", "eval", "coexist"}
    assert isinstance(check, CheckRun) and [s.step for s in check.steps] == ["plan", "bench", "eval", "coexist"]
    assert all(s.run_id == runs[s.step].run_id and s.verdicts and not s.error for s in check.steps)
    assert "The steps of the check" in printed and check.steps[0].verdicts[0] in " ".join(printed.split())
    assert all(r.status == "complete" for r in runs.values())
    assert {r.scenario for r in bench_records} >= {"code-chat", "character-chat", "studio-enhance", "concurrent-4"}
    with RunStore(store) as db:
        bench = load_result(db, runs["bench"])
    assert isinstance(bench, BenchRun)
    four = next(s for s in bench.steps if s.scenario == "concurrent-4")
    assert max(c.in_flight_max for c in four.clients) == 4  # the step held its concurrency
    for step in bench.steps:  # a step too short to judge says so, and blames no side
        assert step.no_verdict is None or step.bottleneck is None, step.scenario
    shares = [float(m) for m in re.findall(r"(?<![+\-\d.])(\d+(?:\.\d+)?)%", " ".join(printed.split()))]
    assert all(share <= 100 for share in shares), shares  # no share printed above all
    html = report.read_text()
    for run in runs.values():
        assert f'id="run-{run.run_id}"' in html
    assert html.count("<table") >= 4 and html.count('<img class="plot"') >= 3
    assert "http://" not in html.split("</style>")[0] and "<script" not in html  # nothing fetched, nothing run


def test_a_target_that_dies_mid_bench_still_gives_a_report(engine: EngineState, tmp_path: Path) -> None:
    fwd = Forwarder(int(engine.url.rsplit(":", 1)[1]))
    fwd.up()
    db = RunStore(tmp_path / "runs.sqlite")
    targets = resolve_targets([("dying", f"http://127.0.0.1:{fwd.port}")])

    def kill_after_two_records() -> None:
        with RunStore(tmp_path / "runs.sqlite") as watch:  # a connection of this thread's own
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                bench = [r for r in watch.list_runs() if r.kind == "bench"]
                if bench and bench[0].record_count >= 2:
                    fwd.down()
                    return
                time.sleep(0.05)

    killer = threading.Thread(target=kill_after_two_records, daemon=True)
    killer.start()
    try:
        results = run_check(db, targets, CheckOptions(skip=frozenset({"plan"}), max_tokens=8))
        killer.join(timeout=5)
        notes = failure_notes(results)
        report = write_report(db, report_runs(results), tmp_path / "report.html", notes=notes).read_text()
    finally:
        db.close()
        fwd.close()
    by_step = {r.step: r for r in results}
    assert by_step["plan"].skipped and by_step["bench"].run_id  # bench ran, and its run is in the report
    assert "What failed" in report
    assert "requests failed" in report  # the bench verdicts name the requests the dead target lost
