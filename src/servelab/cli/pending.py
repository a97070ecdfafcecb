"""Commands whose capability has not landed yet: they say so and exit 2."""

from __future__ import annotations

from collections.abc import Callable

import typer

from servelab.core.errors import NotBuiltYet

PENDING: dict[str, str] = {
    "report": "a self-contained HTML report of one or more runs",
}


def _pending(name: str, what: str) -> Callable[[typer.Context], None]:
    def command(ctx: typer.Context) -> None:
        raise NotBuiltYet(f"`servelab {name}` is not built yet ({what}).")

    command.__doc__ = f"{what[0].upper()}{what[1:]}. (Not built yet.)"
    return command


def register(app: typer.Typer) -> None:
    for name, what in PENDING.items():
        app.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
            _pending(name, what)
        )
