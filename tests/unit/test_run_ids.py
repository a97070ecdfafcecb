"""Run ids: to the millisecond, so runs started in one second read apart and sort by when they started; ids of an
older servelab (to the second) still resolve; `runs list` shows every id whole at 80 and 60 columns."""

from __future__ import annotations

import io
import re
import shutil
import time
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.cli._common import using_console
from servelab.core.store import RunStore, new_run_id
from servelab.core.terminal import make_console

SCHEMA2 = Path(__file__).parents[1] / "fixtures" / "store-schema2.sqlite"
NEW_ID = re.compile(r"^\d{8}-\d{6}\.\d{3}-[0-9a-f]{6}$")


def test_ids_are_to_the_millisecond() -> None:
    now = time.time() // 1 + 0.25
    first, second = new_run_id(now), new_run_id(now + 0.001)
    assert NEW_ID.match(first) and NEW_ID.match(second)
    assert first.split("-")[1] == f"{time.strftime('%H%M%S', time.localtime(now))}.250"
    assert first[:19] < second[:19]  # the time part alone tells them apart, in order


@pytest.mark.parametrize("width", [80, 60])
def test_runs_started_in_one_second_read_apart_beside_old_ids(tmp_path: Path, width: int) -> None:
    path = tmp_path / "runs.sqlite"
    shutil.copy(SCHEMA2, path)
    with RunStore(path) as store:
        old = [r.run_id for r in store.list_runs()]
        made = [store.create_run("bench", {}) for _ in range(3)]
        listed = [r.run_id for r in store.list_runs()]
        assert listed[:3] == made[::-1] and len(set(made)) == 3  # newest first, however close
        assert all(store.get_run(i[:15]).run_id == i for i in old if sum(o.startswith(i[:15]) for o in old) == 1)
        assert store.get_run(made[0]).run_id == made[0]
    out = make_console(width=width, record=True, file=io.StringIO(), color_system=None)
    with using_console(out):
        assert main(["runs", "list", "--store", str(path)]) == 0
    text = out.export_text()
    assert all(run_id in text for run_id in old + made), text
    assert all(len(line) <= width for line in text.splitlines())
