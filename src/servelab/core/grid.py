"""Tables at a terminal, one rule for every command.

A table is drawn across when every column can be as wide as its longest word: cells wrap at spaces only, a
bracketed group (an interval ``[48.8, 50.3]``, a count ``(n=5)``) counts as one word, and the widest columns
narrow first. When even that is wider than the terminal, each row is drawn as a block of ``header: value`` lines.
So a number is never split across lines, and no column is dropped, squeezed into its letters or cut with an
ellipsis. Widths are terminal cells (a wide character counts two)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len, chop_cells
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

GAP = 2  # spaces between two columns
MAX_GROUP = 24  # a bracketed group longer than this (a long list, a bracket never closed) wraps at its own spaces
INDENT = 2  # a record's lines after its first
HANG = 4  # a value's lines after its first, past its key's indent (where under its first word is too narrow)
MIN_HANG = 20  # the least room a value's lines under its first word may have
OPEN, CLOSE = "([{", ")]}"
STYLES = {"title": "italic", "header": "bold", "rule": "dim", "note": "dim"}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PICTURES = {c: 0x2400 + c for c in range(32) if c not in (9, 10)} | {0x7F: 0x2421}  # ␀..␟, ␡
_PICTURES |= dict.fromkeys(range(0x80, 0xA0), 0xFFFD)  # C1 controls: no picture of their own


def visible(text: str) -> str:
    """``text`` with each control character but tab and newline as its picture (ESC as ``␛``): printed, it moves
    no cursor and sets no colour."""
    return text.translate(_PICTURES) if CONTROL.search(text) else text


def words(line: str) -> list[str]:
    """The pieces of one line that are never broken: split at spaces outside brackets."""
    pieces: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in line:
        depth += ch in OPEN
        depth -= ch in CLOSE and depth > 0
        if ch.isspace() and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
    pieces.append("".join(current))
    return [w for p in pieces for w in (p.split() if cell_len(p) > MAX_GROUP else [p]) if w]


def widest_word(text: str) -> int:
    return max((cell_len(w) for line in text.split("\n") for w in words(line)), default=0)


def widest_line(text: str) -> int:
    return max(cell_len(line) for line in text.split("\n"))


def wrap(text: str, width: int, first: int | None = None) -> list[str]:
    """``text`` in lines no wider than ``width`` (the first no wider than ``first``), broken between words; a group
    wider than the whole width breaks at its own spaces, and only a word wider than the whole width (a long URL) is
    folded (:func:`fold`). Nothing is cut."""
    out: list[str] = []
    room = width if first is None else first
    for raw in text.split("\n"):
        line = ""
        pending = words(raw)
        while pending:
            word = pending.pop(0)
            if cell_len(word) > width and " " in word:
                pending[:0] = word.split()
                continue
            if line and cell_len(line) + 1 + cell_len(word) <= room:
                line += " " + word
                continue
            if line or (not out and room < min(width, cell_len(word))):  # a first line too short for it: start below
                out.append(line)
                room, line = width, ""
            *folded, line = fold(word, width)
            out += folded
        out.append(line)
        room = width
    return out


def fold(word: str, width: int) -> list[str]:
    """A word wider than ``width`` in pieces: after a ``/`` where one falls in the width (a ratio ``2,061.2/2,619.4``,
    a URL's path), else at the width."""
    pieces = []
    while cell_len(word) > width:
        cuts = [i + 1 for i, ch in enumerate(word[:-1]) if ch == "/" and cell_len(word[: i + 1]) <= width]
        head = word[: cuts[-1]] if cuts else chop_cells(word, width)[0]
        pieces.append(head)
        word = word[len(head) :]
    return [*pieces, word]


def column_widths(columns: Sequence[Sequence[str]], width: int) -> list[int] | None:
    """Each column's width so the table fits ``width``, none narrower than its widest word; the widest columns give
    way first. None: the table cannot be drawn across without breaking a word."""
    room = width - GAP * (len(columns) - 1)
    least = [max(1, *(widest_word(c) for c in col)) for col in columns]
    natural = [max(1, *(widest_line(c) for c in col)) for col in columns]
    if sum(least) > room:
        return None
    cap = max(natural)
    while sum(max(lo, min(n, cap)) for lo, n in zip(least, natural, strict=True)) > room:
        cap -= 1
    return [max(lo, min(n, cap)) for lo, n in zip(least, natural, strict=True)]


@dataclass
class Grid:
    """A table for a person: headers, rows of text cells (a cell may hold several lines), a title above and a note
    below. It takes its layout from the width it is drawn at (see the module's rule); all text is plain."""

    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    title: str = ""
    note: str = ""
    styles: dict[str, str] = field(default_factory=lambda: dict(STYLES))

    def lines(self, width: int) -> list[tuple[str, str]]:
        """(line, style) pairs, none wider than ``width`` (bar a word wider than the whole width, folded)."""
        width = max(width, 1)
        out = [(line, "title") for line in wrap(self.title, width)] if self.title else []
        columns = [[h, *(row[i] if i < len(row) else "" for row in self.rows)] for i, h in enumerate(self.headers)]
        widths = column_widths(columns, width) if columns else None
        out += across(self.headers, self.rows, widths) if widths else records(self.headers, self.rows, width)
        out += [(line, "note") for line in wrap(self.note, width)] if self.note else []
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line, kind in self.lines(options.max_width):
            yield Text(visible(line), style=self.styles.get(kind, ""), no_wrap=True, overflow="ignore", end="\n")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((cell_len(line) for line, _ in self.lines(options.max_width)), default=0)
        return Measurement(min(widest, options.max_width), options.max_width)


def _row_lines(cells: Sequence[str], widths: Sequence[int], *, bottom: bool) -> Iterator[str]:
    wrapped = [wrap(cell, w) for cell, w in zip(cells, widths, strict=True)]
    height = max(len(w) for w in wrapped)
    padded = [([""] * (height - len(w)) + w) if bottom else (w + [""] * (height - len(w))) for w in wrapped]
    for parts in zip(*padded, strict=True):
        yield (" " * GAP).join(p + " " * (w - cell_len(p)) for p, w in zip(parts, widths, strict=True)).rstrip()


def across(headers: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int]) -> list[tuple[str, str]]:
    """The table drawn across: headers (bottom-aligned) and a rule, when it has headers, then each row."""
    out: list[tuple[str, str]] = []
    if any(h.strip() for h in headers):
        out += [(line, "header") for line in _row_lines(headers, widths, bottom=True)]
        out.append(("─" * (sum(widths) + GAP * (len(widths) - 1)), "rule"))
    for row in rows:
        cells = [row[i] if i < len(row) else "" for i in range(len(headers))]
        out += [(line, "cell") for line in _row_lines(cells, widths, bottom=False)]
    return out


def records(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[tuple[str, str]]:
    """The table drawn down: one block per row, a ``header: value`` line per column, a blank line between blocks."""
    if len(headers) == 2 and all(cell_len(_one_line(row[0])) + 2 + widest_word(row[-1]) <= width for row in rows):
        return pairs(headers, rows, width)
    out: list[tuple[str, str]] = []
    for n, row in enumerate(rows):
        if n:
            out.append(("", "cell"))
        for i, header in enumerate(headers):
            out += _field(_one_line(header), row[i] if i < len(row) else "", INDENT if i else 0, width)
    if not rows:
        out += [(line, "cell") for line in wrap("(no rows) " + " | ".join(_one_line(h) for h in headers), width)]
    return out


def pairs(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[tuple[str, str]]:
    """A two-column table drawn down: its headers as ``first: second``, then one ``key: value`` line per row."""
    out = _field(_one_line(headers[0]), _one_line(headers[1]), 0, width)
    out = [(text, "header") for text, _ in out]
    for row in rows:
        out += _field(_one_line(row[0]), row[1] if len(row) > 1 else "", 0, width)
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _field(key: str, value: str, indent: int, width: int) -> list[tuple[str, str]]:
    """One ``key: value`` line; a value that does not fit goes on in lines under its first word, or, where that
    leaves too little room, indented a little past its key."""
    if not key:  # a table without headers: its values alone
        return [(" " * indent + line, "cell") for line in wrap(value, max(width - indent, 1))]
    *over, last = wrap(key + ":", max(width - indent, 1))  # a key wider than the terminal wraps too
    out = [(" " * indent + line, "cell") for line in over]
    head = " " * indent + last
    if not value:
        return [*out, (head, "cell")]
    under = cell_len(head) + 1
    widest = widest_word(value)
    rest = under if width - under >= max(MIN_HANG, widest) else max(0, min(indent + HANG, width - widest))
    first, *more = wrap(value, max(width - rest, 1), first=width - under)
    out.append((f"{head} {first}" if first else head, "cell"))
    return out + [(" " * rest + line, "cell") for line in more]
