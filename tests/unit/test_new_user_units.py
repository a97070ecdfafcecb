"""A new user's path where a fixture is enough (the fixture SSE server is not an LLM: it streams on a schedule):
the progress of a bench with its counts, the tables that follow it at 80 columns, and check on a machine without a
GPU asking for --gpu instead of planning for one it does not have."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from servelab.check import CheckOptions, run_check, this_gpu
from servelab.cli import main
from servelab.cli._common import using_console
from servelab.core.store import RunStore
from servelab.core.terminal import make_console


def test_a_bench_shows_its_progress_then_its_tables(fixture_server: str, tmp_path: Path) -> None:
    out = make_console(width=80, record=True, file=io.StringIO(), color_system=None)
    argv = ["bench", "--target", f"fx={fixture_server}/schedule", "--scenario", "code-chat", "--requests", "3",
            "--max-tokens", "4", "--warmup", "0", "--store", str(tmp_path / "s.sqlite")]  # fmt: skip
    with using_console(out):
        assert main(argv) == 0
    text = out.export_text()
    assert "target fx: fixture at" in text
    assert "code-chat on fx" in text and "3/3" in text  # the bar: the step and its count
    assert text.index("3/3") < text.index("Side by side") < text.index("Every step")
    assert all(len(line) <= 80 for line in text.splitlines())


@pytest.mark.skipif(this_gpu() is not None, reason="this machine has a GPU the plan knows")
def test_check_without_a_gpu_asks_for_one(tmp_path: Path) -> None:
    options = CheckOptions(model_config="llama-3.1-8b", skip=frozenset({"bench", "eval", "coexist"}))
    with RunStore(tmp_path / "s.sqlite") as store:
        outcome = run_check(store, [], options)
        kinds = [r.kind for r in store.list_runs()]
    (plan,) = [s for s in outcome if s.step == "plan"]
    assert plan.skipped is not None and "give --gpu" in plan.skipped and plan.run_id is None
    assert kinds == ["check"]  # nothing planned for a GPU this machine does not have


def test_check_on_the_embedded_engine_plans_for_its_own_memory(tmp_path: Path) -> None:
    """No GPU, but the embedded engine: its KV pool and context are what the plan is for (not an H100)."""
    options = CheckOptions(model_config="smollm2-135m", skip=frozenset({"bench", "eval", "coexist"}),
                           engine_memory=(2 * 2**30, 8192))  # fmt: skip
    with RunStore(tmp_path / "s.sqlite") as store:
        outcome = run_check(store, [], options)
    (plan,) = [s for s in outcome if s.step == "plan"]
    assert plan.run_id and plan.verdicts == ["fits: holds 11.3 sessions of 8K on the embedded CPU engine in a 2.00 GiB "
                                             "KV pool"]  # fmt: skip


def test_check_plans_the_models_own_context_and_refuses_a_longer_one(tmp_path: Path) -> None:
    from servelab.core.errors import UsageError

    skip = frozenset({"bench", "eval", "coexist"})
    with RunStore(tmp_path / "s.sqlite") as store:
        outcome = run_check(store, [], CheckOptions(model_config="smollm2-135m", gpu="h100-80gb", skip=skip))
        with pytest.raises(UsageError, match=r"--context 32,768 is longer than the model supports \(8,192"):
            run_check(store, [], CheckOptions(model_config="smollm2-135m", gpu="h100-80gb", context="32k", skip=skip))
        kinds = sorted(r.kind for r in store.list_runs())
    (plan,) = [s for s in outcome if s.step == "plan"]
    assert plan.verdicts[0].startswith("fits: holds 1.3 sessions of 8K on h100-80gb")  # 8K: the model's maximum
    assert kinds == ["check", "plan"]  # the refused one stored nothing
