"""Progress a person can read on every long step: what runs, how many of how many, how long it has taken and how
long it should still take (rich's bar; nothing at all for --json)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

from servelab.cli._common import console
from servelab.core.records import RequestRecord


class Steps:
    """One bar per step; ``advance`` moves the current one."""

    def __init__(self, bar: Progress | None) -> None:
        self.bar, self.task = bar, TaskID(-1)

    def start(self, what: str, total: int | None) -> None:
        if self.bar is None:
            return
        if self.task >= 0:
            self.bar.update(self.task, completed=self.bar.tasks[-1].total or self.bar.tasks[-1].completed)
        self.task = self.bar.add_task(what, total=total)

    def advance(self, by: int = 1) -> None:
        if self.bar is not None and self.task >= 0:
            self.bar.advance(self.task, by)

    def record(self, record: RequestRecord) -> None:
        """A finished request moves the bar (a multi-turn item's later turns do not)."""
        if (record.labels.turn or 1) == 1:
            self.advance()


@contextmanager
def steps(enabled: bool = True) -> Iterator[Steps]:
    if not enabled:
        yield Steps(None)
        return
    whole = Column(no_wrap=True)  # the counts and times keep their width; the step's name wraps to make room
    columns = (TextColumn("{task.description}", markup=False, table_column=Column(overflow="fold")),
               BarColumn(bar_width=10 if console().width < 70 else 20, table_column=whole),
               MofNCompleteColumn(table_column=whole), TimeElapsedColumn(table_column=whole),
               TextColumn("left", table_column=whole), TimeRemainingColumn(table_column=whole))  # fmt: skip
    with Progress(*columns, console=console(), transient=False) as bar:
        yield Steps(bar)
