"""``--help`` that reads at any width: click's plain layout, wrapped only at spaces.

rich's help panels cut a long option name to fit their columns (``--gpu-memory-utilizat…`` at 80 columns) and
click's own wrapper breaks words at hyphens (``--kv-cache-memory-`` / ``bytes``). Here an option's name is always
whole (it keeps its column, or its help starts on the next line) and so is every word of a help text, a flag named
in a sentence or a bracketed default included (the wrapping of :mod:`servelab.core.grid`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar, cast

import typer
from rich.cells import cell_len
from typer.core import TyperCommand, TyperGroup

from servelab.core.grid import wrap

PARAGRAPH = re.compile(r"\n[ \t]*\n")
F = TypeVar("F")


def fill(text: str, width: int, indent: str) -> str:
    """Paragraphs (split at blank lines) wrapped at spaces to ``width``; a paragraph led by ``\\b`` kept as written,
    as click keeps one."""
    out = []
    for paragraph in PARAGRAPH.split(text.strip("\n")):
        lines = paragraph.split("\n")
        if lines[0].strip() == "\b":
            out.append("\n".join(indent + line for line in lines[1:]))
        else:
            out.append("\n".join(indent + line for line in wrap(" ".join(paragraph.split()), width - len(indent))))
    return "\n\n".join(out)


def write_text(self: Any, text: str) -> None:
    self.write(fill(text, max(self.width, 20), " " * self.current_indent) + "\n")


def write_dl(self: Any, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
    """click's definition list (an option and its help), its help wrapped at spaces only."""
    rows = list(rows)
    first_col = min(max((cell_len(first) for first, _ in rows), default=0), col_max) + col_spacing
    hang = " " * (first_col + self.current_indent)
    for first, second in rows:
        self.write(" " * self.current_indent + first)
        if not second:
            self.write("\n")
            continue
        fits = cell_len(first) <= first_col - col_spacing
        self.write(" " * (first_col - cell_len(first)) if fits else "\n" + hang)
        lines = fill(second, max(self.width - first_col - 2, 10), "").split("\n")
        self.write("\n".join([lines[0], *(hang + line if line else "" for line in lines[1:])]) + "\n")


def _wrapping_at_spaces(base: type[F]) -> type[F]:
    """click's help formatter (the one this typer carries), its texts wrapped at spaces only."""
    return cast(type[F], type("HelpFormatter", (base,), {"write_text": write_text, "write_dl": write_dl}))


class Context(typer.Context):
    formatter_class = _wrapping_at_spaces(typer.Context.formatter_class)


class Command(TyperCommand):
    context_class = Context


class Group(TyperGroup):
    context_class = Context


def plain_help(app: typer.Typer) -> None:
    """Every command and group of ``app``, its sub-apps' included, writes its help through :class:`Context`'s
    formatter, and none through rich's panels. Call it once every command is registered."""
    app.rich_markup_mode = None
    app.info.cls = Group
    _commands(app.registered_commands)
    for group in app.registered_groups:
        group.cls = Group
        if group.typer_instance is not None:
            plain_help(group.typer_instance)


def _commands(infos: Sequence[typer.models.CommandInfo]) -> None:
    """A command of typer's own class gets ours (one of a class of its own keeps it)."""
    for info in infos:
        if info.cls in (None, TyperCommand):
            info.cls = Command
