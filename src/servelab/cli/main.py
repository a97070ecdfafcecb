"""The entry point: every failure becomes a message and an exit code."""

from __future__ import annotations

import os
import sys
import traceback

import typer
from rich.console import Console

from servelab.cli._common import console
from servelab.cli.app import app
from servelab.core.errors import ServelabError


def main(argv: list[str] | None = None) -> int:
    """Entry point: every failure becomes a message and an exit code, never a traceback
    (set SERVELAB_DEBUG=1 to see one for an unexpected error)."""
    err = Console(stderr=True, highlight=False)
    console()  # the one console every command of this invocation writes to (a test may have given its own)
    try:
        code = app(args=argv, prog_name="servelab", standalone_mode=False)
    except ServelabError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        if exc.hint:
            err.print(f"[dim]hint:[/] {exc.hint}")
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except typer.Abort:
        err.print("aborted")
        return 1
    except typer.TyperException as exc:  # usage errors: unknown command, missing argument, bad value
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err.print(f"[bold red]error:[/] {exc}")
        return int(getattr(exc, "exit_code", 2))
    except Exception as exc:  # a bug of ours: say so plainly
        if os.environ.get("SERVELAB_DEBUG"):
            traceback.print_exc()
        err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc}")
        err.print("[dim]hint:[/] this is a servelab bug; SERVELAB_DEBUG=1 shows the traceback")
        return 70
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
