"""The one layout rule every table at a terminal obeys (servelab.core.grid): drawn across when each column holds its
widest word, else one block of ``header: value`` lines per row; never a number split, a column dropped or a cell cut.
Generated tables at generated widths, and the cases the issue met (a number split at 80 columns, the repo-repair
trap matrix dropping 4 of its 6 traps, a rich Table squeezed)."""

from __future__ import annotations

import io
import re
import string
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.table import Table

from servelab.core.grid import GAP, Grid
from servelab.core.terminal import make_console

NUMBER_RE = re.compile(r"\d[\d,]*(?:\.\d+)?")

NUMBER = st.builds(lambda v, d: f"{v:,.{d}f}", st.floats(0, 99_999, allow_nan=False), st.integers(0, 3))
INTERVAL = st.builds(lambda a, b: f"[{a}, {b}]", NUMBER, NUMBER)
COUNT = st.builds(lambda n: f"(n={n})", st.integers(0, 10**6))
RATIO = st.builds(lambda a, b: f"{a}/{b}", NUMBER, NUMBER)  # "2,061.2/2,619.4": one word
WORD = st.text(alphabet=string.ascii_letters + "-_@#%:", min_size=1, max_size=12)
ATOM = st.one_of(NUMBER, INTERVAL, COUNT, RATIO, WORD)
CELL = st.lists(ATOM, max_size=4)
HEADER = st.lists(WORD, min_size=1, max_size=3)


Atoms = tuple[list[list[str]], list[list[list[str]]]]


@st.composite
def tables(draw: st.DrawFn) -> Atoms:
    """Headers and rows as lists of unbreakable atoms (so the test knows every word without the code's help)."""
    n = draw(st.integers(1, 9))
    headers = [draw(HEADER) for _ in range(n)]
    rows = draw(st.lists(st.lists(CELL, min_size=n, max_size=n), max_size=5))
    return headers, rows


def render(grid: Grid | Table, width: int) -> list[str]:
    out = make_console(width=width, record=True, file=io.StringIO(), color_system=None)
    out.print(grid)
    return out.export_text().splitlines()


def numbers(lines: list[str]) -> Counter[str]:
    return Counter(n for line in lines for n in NUMBER_RE.findall(line))


@settings(max_examples=150, deadline=None)
@given(tables(), st.integers(20, 140))
def test_a_table_fits_whole_or_turns_to_records(table: Atoms, width: int) -> None:
    header_atoms, row_atoms = table
    headers = [" ".join(h) for h in header_atoms]
    rows = [[" ".join(cell) for cell in row] for row in row_atoms]
    lines = render(Grid(headers, rows), width)
    assert all(len(line) <= width for line in lines), lines
    # no number split: every number of every cell and header is found whole on one line (a split one is not)
    given_numbers = Counter(n for text in headers + [c for row in rows for c in row] for n in NUMBER_RE.findall(text))
    assert numbers(lines) >= given_numbers, (given_numbers - numbers(lines), lines)
    # every word (an interval, a ratio, a count) whole on a line
    for atoms in [*header_atoms, *(cell for row in row_atoms for cell in row)]:
        for atom in (a for a in atoms if len(a) <= width):  # (a wider interval breaks at its space)
            assert any(atom in line for line in lines), (atom, lines)
    # across exactly when each column can hold its widest word; then every header on the header lines
    least = [max(len(a) for a in [*h, *(a for row in row_atoms for a in row[i])]) for i, h in enumerate(header_atoms)]
    across = sum(least) + GAP * (len(least) - 1) <= width
    assert any(set(line) == {"─"} for line in lines) == across, (least, width, lines)
    if not across and rows and len(headers) > 2:  # a block per row, a "header: value" line per column
        for h in (h for h in headers if len(h) + 3 <= width):  # (a key wider than the terminal wraps too)
            assert sum(line.strip().startswith(f"{h}:") for line in lines) >= len(rows), (h, lines)


def test_a_ratio_of_two_numbers_is_never_split() -> None:
    """The issue's `2,061.2/2` / `,619.4`: at 80 and 60 columns the ratio is whole on one line."""
    headers = ["step", "ok/n", "TTFT ms p50/p99", "ITL ms p50/p99", "TPOT ms p50/p99", "E2E s p50/p99", "req/s",
               "tokens in/out", "agg tok/s client/engine"]  # fmt: skip
    row = ["character-chat@c4", "12/12", "2,061.2/2,619.4", "19.7/21.0", "19.9/20.1", "1.95/2.61", "5.81",
           "1,536/768", "2,061.2/2,619.4"]  # fmt: skip
    for width in (80, 60):
        lines = render(Grid(headers, [row]), width)
        assert sum("2,061.2/2,619.4" in line for line in lines) == 2, lines
        assert all(len(line) <= width for line in lines)


def test_six_traps_are_six_columns_or_six_lines() -> None:
    """The repo-repair trap matrix kept 2 of its 6 traps at 80 columns: every trap is said, for every target."""
    traps = ["edits-tests", "reads-hidden", "patches-grader", "network", "sleeps-out", "writes-outside"]
    headers = ["target", "resolved", "visible tests", "hidden tests", "gap", "tampered", *traps]
    rows = [[name, "3/6 [19%, 81%]", "83%", "50%", "33%", "0", *(f"{i}/6" for i in range(6))] for name in ("a", "b")]
    for width in (80, 60):
        text = "\n".join(render(Grid(headers, rows, title="Repo repair: ledger"), width))
        for trap in traps:
            assert text.count(f"{trap}:") == 2, text  # one line per target
        assert "[19%, 81%]" in text and "…" not in text


def test_a_rich_table_printed_on_a_servelab_console_obeys_the_rule() -> None:
    """A command that builds a rich Table (plan, runs list, whatever comes next) gets the same layout: nothing cut."""
    table = Table("budget", "memory", title="vllm on h100-80gb (79.11 GiB)")
    table.add_row("engine overhead (modelled)", "2.31 GiB  activation peak 1.20 GiB, CUDA graphs 0.61 GiB")
    table.add_row("gpu_memory_utilization", "0.97 (needs >= 0.91, co-tenants allow <= 0.97)")
    for width in (80, 60, 40):
        text = "\n".join(render(table, width))
        assert "…" not in text and "0.91," in text and "(needs" in text and "2.31" in text and "0.61" in text
        assert all(len(line) <= width for line in text.splitlines())
    assert "budget" in render(table, 80)[1] and "memory" in render(table, 80)[1]


def test_cells_wrap_at_spaces_under_their_column() -> None:
    grid = Grid(["target", "why / reply"], [["fx", "cut at max_tokens after a long answer about the weather"]])
    lines = render(grid, 40)
    assert lines[0].split() == ["target", "why", "/", "reply"] and set(lines[1]) == {"─"}
    assert lines[2].startswith("fx      cut at") and all(line.startswith(" " * 8) for line in lines[3:])
