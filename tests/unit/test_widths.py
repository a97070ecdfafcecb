"""Every command's tables at 80 and 60 columns: no line wider, no number split, no column dropped, nothing cut.

The runs are stored ones of every kind (the schema-2 fixture store: bench, SLO search, eval, coexist, plan), results
built here (a repo-repair trap matrix of six traps, a check with a failed and a skipped step) and a real two-target
bench against the SSE fixture; the commands are run as a person runs them (``runs list``, ``runs show``, ``plan``,
``plan --calibrate``, ``compare``). A table's numbers must all be found whole on a line of the output; its headers'
and cells' words must all be found in it."""

from __future__ import annotations

import io
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.cli._common import using_console
from servelab.core.results import CheckRun, CheckStep, RepoRun, RepoTarget, Resolved, save_result
from servelab.core.store import RunStore
from servelab.core.terminal import make_console
from servelab.report import build_sections, print_section, summary_table
from tests.unit.test_console import SUMMARY

SCHEMA2 = Path(__file__).parents[1] / "fixtures" / "store-schema2.sqlite"
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
WIDTHS = (80, 60)
TRAPS = (
    "edits_tests",
    "reads_hidden_tests",
    "patches_grader",
    "network_access",
    "sleeps_out_the_clock",
    "writes_outside",
)
LOG = (
    "INFO [gpu_worker.py:538] Available KV cache memory: 13.14 GiB\n"
    "INFO [kv_cache_utils.py:2146] GPU KV cache size: 319,254 tokens\n"
    "INFO [kv_cache_utils.py:2147] Maximum concurrency for 32,768 tokens per request: 9.74x\n"
)


def _repo_run() -> RepoRun:
    def target(k: int) -> RepoTarget:
        return RepoTarget(resolved=Resolved(k=k, n=6, low=0.19, high=0.81), outcomes={"resolved": k, "wrong": 6 - k},
                          visible_pass_rate=0.83, hidden_pass_rate=k / 6, gap=0.83 - k / 6,
                          traps={t: i % 3 for i, t in enumerate(TRAPS)}, tampered=1, attempts=6)  # fmt: skip

    return RepoRun(task="ledger-rounding", targets={"qwen3.6-27b-fp8": target(3), "laguna-s-2.1-int4": target(5)})


def _check_run(plan_id: str) -> CheckRun:
    said = "requests failed: e/code-chat: 1 of 2 failed: context too long (1): \"This model's maximum context length"
    said += ' is 8192 tokens. However, you requested 9,731 tokens"'
    return CheckRun(steps=[
        CheckStep(step="plan", run_id=plan_id, verdicts=["fits: holds 11.3 sessions of 8K in a 2.00 GiB KV pool"]),
        CheckStep(step="bench", error=said),
        CheckStep(step="coexist", skipped="this machine has no GPU the probe can use; give --probe cpu"),
    ])  # fmt: skip


def _store(store: RunStore, kind: str, result: RepoRun | CheckRun) -> None:
    run_id = store.create_run(kind, {"servelab_version": "test"})
    save_result(store, run_id, result)
    store.finish_run(run_id)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, fixture_server: str) -> Path:
    """A store with a run of every kind; its two-target bench measured on the SSE fixture."""
    path = tmp_path_factory.mktemp("widths") / "runs.sqlite"
    shutil.copy(SCHEMA2, path)
    with RunStore(path) as store:
        plan_id = next(r.run_id for r in store.list_runs() if r.kind == "plan")
        _store(store, "repo", _repo_run())
        _store(store, "check", _check_run(plan_id))
    argv = ["bench", "--target", f"local-vllm={fixture_server}/schedule", "--target",
            f"remote-llama-server={fixture_server}/schedule", "--scenario", "code-chat", "--scenario", "concurrent-4",
            "--requests", "4", "--max-tokens", "4", "--warmup", "0", "--store", str(path)]  # fmt: skip
    with using_console(make_console(width=200, file=io.StringIO())):
        assert main(argv) == 0
    return path


def rendered(width: int, argv: list[str] | None = None, section: object = None) -> str:
    out = make_console(width=width, record=True, file=io.StringIO(), color_system=None)
    with using_console(out):
        if argv is not None:
            assert main(argv) in (0, 3), out.export_text()
        if section is not None:
            print_section(out, section)  # type: ignore[arg-type]
    return out.export_text()


def _numbers(text: str) -> Counter[str]:
    return Counter(NUMBER.findall(text))


def _words(text: str) -> set[str]:
    return {w.rstrip(":") for w in text.split() if set(w) != {"─"}}


def assert_reads(text: str, width: int, cells: list[str]) -> None:
    """No line wider than ``width``, nothing cut, every number of ``cells`` whole on a line, every word of them
    somewhere."""
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(line for line in lines if len(line) > width)
    assert "…" not in text
    missing = _numbers("\n".join(cells)) - _numbers(text)
    assert not missing, (missing, text)
    words = _words(text)
    absent = {w for w in _words("\n".join(cells)) if len(w) <= width} - words  # (a longer one is folded)
    assert not absent, (absent, text)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_stored_kind_of_run_reads(runs: Path, width: int) -> None:
    with RunStore(runs) as store:
        infos = store.list_runs()
        sections = build_sections(store, [r.run_id for r in infos])
    kinds = {s.kind for s in sections}
    assert {"bench", "bench-slo", "eval", "coexist", "plan", "repo", "check"} <= kinds
    for section in sections:
        cells = [c for t in section.tables for c in [t.caption, *t.headers, *(c for row in t.rows for c in row)]]
        assert_reads(rendered(width, section=section), width, cells)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_six_traps_and_the_two_targets_are_all_there(runs: Path, width: int) -> None:
    """The issue's trap matrix kept 2 of its 6 traps at 80 columns, and the two-target side by side was squeezed."""
    text = rendered(width, ["runs", "show", "latest", "--store", str(runs)])
    assert "local-vllm" in text and "remote-llama-server" in text and "concurrent-4" in text
    with RunStore(runs) as store:
        repo = next(r.run_id for r in store.list_runs() if r.kind == "repo")
    text = rendered(width, ["runs", "show", repo, "--store", str(runs)])
    assert all(trap in text for trap in TRAPS), text
    assert "qwen3.6-27b-fp8" in text and "laguna-s-2.1-int4" in text and "3/6" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_every_command_with_a_table_reads(runs: Path, width: int, tmp_path: Path) -> None:
    """The commands' own tables (runs list, plan's budget and cache, the calibration beside a log, compare) against
    the same command at 400 columns, where nothing wraps: every number and word of it is still there, whole."""
    log = tmp_path / "vllm.log"
    log.write_text(LOG)
    with RunStore(runs) as store:
        bench = [r.run_id for r in store.list_runs() if r.kind == "bench"]
    commands = [
        ["runs", "list", "--store", str(runs)],
        ["plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--alongside", "tts=7GiB"],
        ["plan", "laguna-s-2.1", "--gpu", "h100-80gb", "--quant", "int4", "--context", "128k", "--concurrency", "4"],
        ["plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--calibrate", str(log)],
        ["compare", bench[0], bench[1], "--store", str(runs)],
    ]
    for argv in commands:
        wide = rendered(400, argv)
        narrow = rendered(width, argv)
        assert_reads(narrow, width, wide.splitlines())
        assert _numbers(narrow) >= _numbers(wide), argv
    listed = rendered(width, ["runs", "list", "--store", str(runs)])
    with RunStore(runs) as store:
        assert all(r.run_id in listed for r in store.list_runs())  # run ids never cut


@pytest.mark.parametrize("width", WIDTHS)
def test_a_levels_summary_reads(width: int) -> None:
    out = make_console(width=width, record=True, file=io.StringIO(), color_system=None)
    out.print(summary_table("local/character-chat@c4", SUMMARY))
    cells = [
        "TTFT (ms)",
        "12.5",
        "too few (n=9)",  # TTFT's p90 and p99 from 9 requests: not printed as percentiles
        "inter-chunk gap (ms)",
        "per-stream tok/s",
        "180.0",
        "1,500.0",
        "3.20",
    ]
    assert_reads(out.export_text(), width, cells)


def test_a_bench_bar_keeps_its_counts_at_60_columns(fixture_server: str, tmp_path: Path) -> None:
    """At 60 columns the bar dropped its counts and times behind 'left …': now the step's name wraps instead."""
    argv = ["bench", "--target", f"remote-llama-server-long={fixture_server}/schedule", "--scenario", "code-chat",
            "--scenario", "character-chat", "--requests", "2", "--max-tokens", "4", "--warmup", "0",
            "--store", str(tmp_path / "s.sqlite")]  # fmt: skip
    text = rendered(60, argv)
    bars = [line for line in text.splitlines() if "━" in line]
    assert len(bars) >= 2 and all(re.search(r"2/2 +\d+:\d\d:\d\d left +\S", line) for line in bars), text
    assert all(len(line) <= 60 for line in text.splitlines())
