"""What reaches a person's terminal, by two rules kept here for every command.

- No text is markup. servelab's consoles parse neither rich markup nor emoji codes, nor highlight: a scenario
  named ``synthetic:100:8``, a model id with ``[bold]``, a file name, a server's error or a model's reply is printed
  as it is. servelab's own styling goes in as :class:`rich.text.Text` (:func:`styled`, :func:`line`), never as
  ``[bold]`` in a string: such a string prints as written.
- No text drives the terminal: a control character (an escape sequence in a server's error, a bell) is shown as its
  visible picture (``␛``), one character for one.
- Every table obeys the layout rule of :mod:`servelab.core.grid`: a rich ``Table`` printed on these consoles is
  drawn as a :class:`~servelab.core.grid.Grid` (its title, headers, cells and caption as plain text), so no number
  is split and no column dropped or cut, whichever command built it."""

from __future__ import annotations

from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from servelab.core.grid import CONTROL, Grid, visible


class Terminal(Console):
    """A rich console that takes no text for markup and draws every table by the grid rule."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{"highlight": False, **options, "markup": False, "emoji": False})

    def print(self, *objects: Any, **options: Any) -> None:
        super().print(*(_safe(o) for o in objects), **options)


def _safe(value: Any) -> Any:
    if isinstance(value, Table):
        return as_grid(value)
    if isinstance(value, str):
        return Text(visible(value))
    if isinstance(value, Text) and CONTROL.search(value.plain):
        value = value.copy()
        value.plain = visible(value.plain)
    return value


def make_console(**options: Any) -> Terminal:
    """A console for servelab's output (``stderr=True`` for errors; a test gives ``width``, ``record``, ``file``)."""
    return Terminal(**options)


def plain(value: RenderableType | None) -> str:
    """A cell, header, title or caption as plain text (its styles dropped, its text kept as written)."""
    if value is None:
        return ""
    if isinstance(value, Text):
        return value.plain
    return value if isinstance(value, str) else str(value)


def as_grid(table: Table) -> Grid:
    """A rich table's text, laid out by the grid rule."""
    headers = [plain(c.header) for c in table.columns]
    rows = [[plain(cell) for cell in cells] for cells in zip(*(c.cells for c in table.columns), strict=True)]
    return Grid(headers, rows, title=plain(table.title), note=plain(table.caption))


def styled(text: str, style: str) -> Text:
    """Text in one style; ``text`` is kept as written, whatever brackets or colons it holds."""
    return Text(text, style=style)


def line(*parts: str | tuple[str, str]) -> Text:
    """One line from plain parts and (text, style) pairs: ``line(("error:", "bold red"), " ", message)``."""
    return Text.assemble(*parts)
