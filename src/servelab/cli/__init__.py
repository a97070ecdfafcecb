"""The `servelab` command line: thin typer commands over library calls."""

from __future__ import annotations

import sys

from rich.console import Console

from servelab.cli.app import app
from servelab.core.errors import ServelabError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point; a :class:`ServelabError` becomes a message and an exit code, never a traceback."""
    try:
        code = app(args=argv, prog_name="servelab", standalone_mode=False)
    except ServelabError as exc:
        err = Console(stderr=True)
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        if exc.hint:
            err.print(f"[dim]hint:[/] {exc.hint}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted")
        return 130
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int | None) else 1
    except Exception as exc:  # click usage errors and aborts
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return int(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            return 1
        raise
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
