"""The report opened in headless Chromium: its tables and plots are on screen (laid out, not hidden or covered,
images decoded), not merely present in the HTML; the answer tables on the first screen at 1280 and 390 px. Runs: a
bench run (12 requests: enough to draw its TTFT) against the SSE fixture server, a coexist run with a scripted probe,
a check and a two-target bench against the fake engine: what is tested is the report, not the measurements."""

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
        bench = run_bench(db, targets, expand(["code-chat"]), Load(requests=12, max_tokens=8, warmup=0))
        coexist = run_coexist(db, ScriptedProbe(), None, CoexistOptions(conditions=("alone",), repeats=2))
        report = write_report(db, [bench.run_id, coexist.run_id], tmp_path / "report.html")
    page.open(report)
    seen = page.evaluate(VISIBLE)
    assert seen["tables"] >= 2 and seen["tablesOnScreen"] == seen["tables"], seen
    assert seen["imgs"] >= 3 and seen["imgsOnScreen"] == seen["imgs"], seen
    assert seen["verdicts"] >= 1
    shot = page.screenshot(tmp_path / "shot.png")
    assert shot.stat().st_size > 10_000  # something was drawn


FIRST_SCREEN = """(() => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.top + scrollY, r.bottom + scrollY]; };
  const answers = [...document.querySelectorAll(".answers table")];
  const wide = [...document.querySelectorAll("body *")].filter(el => el.getBoundingClientRect().right > innerWidth + 1
    && !el.closest(".scroll"));
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: innerWidth,
          answers: answers.map(box), verdicts: box(document.getElementById("verdicts")),
          answersScrolling: [...document.querySelectorAll(".answers .scroll")]
            .filter(d => d.scrollWidth > d.clientWidth + 1).length,
          wider: wide.slice(0, 5).map(el => el.tagName + "." + el.className)};
})()"""


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A check and a two-target bench, measured against the fake engine (tests/fixtures/stored_runs.py)."""
    from tests.fixtures import stored_runs

    folder = tmp_path_factory.mktemp("stored")
    stored_runs.check(folder / "check.sqlite")
    stored_runs.two_target_bench(folder / "bench.sqlite")
    return {"check": folder / "check.sqlite", "bench": folder / "bench.sqlite"}


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("kind", ["check", "bench"])
def test_the_answer_tables_are_on_the_first_screen(
    page: Page, stored: dict[str, Path], kind: str, width: int, tmp_path: Path
) -> None:
    """At 1280 px every answer table lies within the first 1,000 px; at 390 px (a phone) the answer starts there and
    the first two tables lie wholly within it, the rest follow before the verdicts; at neither width does the page
    scroll sideways, nor an answer table (an evidence table wider than a phone scrolls inside its own box)."""
    with RunStore(stored[kind]) as db:
        report = write_report(db, [], tmp_path / "report.html")
    page.viewport(width, 1000)
    page.open(report)
    seen = page.evaluate(FIRST_SCREEN)
    assert seen["innerWidth"] == width and seen["scrollWidth"] <= width and not seen["wider"], seen
    assert seen["answersScrolling"] == 0, seen  # an answer table reads without scrolling, even on a phone
    tables = seen["answers"]
    assert len(tables) == {"check": 5, "bench": 2}[kind], seen
    held = tables if width >= 1280 else tables[:2]
    assert all(bottom <= 1000 for _, bottom in held), seen
    assert all(bottom <= seen["verdicts"][0] for _, bottom in tables), seen  # the answers before the verdicts
    shot = page.screenshot(tmp_path / f"{kind}-{width}.png")
    assert shot.stat().st_size > 10_000
