"""The report opened in headless Chromium: its tables and plots are on screen (laid out, not hidden or covered,
images decoded), not merely present in the HTML. Runs: a bench run against the SSE fixture server and a coexist
run with a scripted probe: what is tested is the report, not the measurements."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.bench import Load, expand, resolve_targets, run_bench
from servelab.coexist import CoexistOptions, run_coexist
from servelab.core.store import RunStore
from servelab.report import write_report
from tests.fixtures.browser import Page, chromium
from tests.unit.coexist.test_run import ScriptedProbe

VISIBLE = """(() => {
  const onScreen = el => {
    el.scrollIntoView({block: "center"});
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    if (r.width < 20 || r.height < 20 || s.visibility === "hidden" || s.display === "none") return false;
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + Math.min(r.height / 2, 40));
    return hit !== null && (hit === el || el.contains(hit));
  };
  const tables = [...document.querySelectorAll("table.figures")];
  const imgs = [...document.querySelectorAll("img.plot")];
  return {tables: tables.length, tablesOnScreen: tables.filter(onScreen).length, imgs: imgs.length,
          imgsOnScreen: imgs.filter(i => onScreen(i) && i.complete && i.naturalWidth > 100).length,
          verdicts: document.querySelectorAll("ul.verdicts li").length};
})()"""


@pytest.fixture()
def page() -> Iterator[Page]:
    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing; `make test` installs it", pytrace=False)
        pytest.skip("chromium is not installed (apt-get install chromium)")
    p = Page()
    yield p
    p.close()


def test_tables_and_plots_are_visible_on_screen(page: Page, fixture_server: str, tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.sqlite") as db:
        targets = resolve_targets([("fixture", f"{fixture_server}/schedule")])
        bench = run_bench(db, targets, expand(["code-chat"]), Load(requests=4, max_tokens=8, warmup=0))
        coexist = run_coexist(db, ScriptedProbe(), None, CoexistOptions(conditions=("alone",), repeats=2))
        report = write_report(db, [bench.run_id, coexist.run_id], tmp_path / "report.html")
    page.open(report)
    seen = page.evaluate(VISIBLE)
    assert seen["tables"] >= 2 and seen["tablesOnScreen"] == seen["tables"], seen
    assert seen["imgs"] >= 3 and seen["imgsOnScreen"] == seen["imgs"], seen
    assert seen["verdicts"] >= 1
    shot = page.screenshot(tmp_path / "shot.png")
    assert shot.stat().st_size > 10_000  # something was drawn
