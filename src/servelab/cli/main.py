"""The entry point: every failure becomes a message and an exit code."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator

import typer
from rich.console import Console

from servelab.cli._common import console
from servelab.cli.app import app
from servelab.core.errors import Interrupted, ServelabError
from servelab.core.recorder import INTERRUPTED
from servelab.core.terminal import line, make_console


def main(argv: list[str] | None = None) -> int:
    """Entry point: every failure becomes a message and an exit code, never a traceback
    (set SERVELAB_DEBUG=1 to see one for an unexpected error)."""
    err = make_console(stderr=True)
    console()  # the one console every command of this invocation writes to (a test may have given its own)
    try:
        with _signals_interrupt():
            code = app(args=argv, prog_name="servelab", standalone_mode=False)
        if code == 130:  # typer answers Ctrl-C (and so our signals, KeyboardInterrupts too) with Exit(130)
            return _interrupted(err, Interrupted(_RECEIVED[-1]) if _RECEIVED else KeyboardInterrupt())
    except ServelabError as exc:
        err.print(line(("error:", "bold red"), f" {exc}"))
        if exc.hint:
            err.print(line(("hint:", "dim"), f" {exc.hint}"))
        return exc.exit_code
    except (KeyboardInterrupt, Interrupted) as exc:
        return _interrupted(err, exc)
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
            err.print(line(("error:", "bold red"), f" {exc}"))
        return int(getattr(exc, "exit_code", 2))
    except Exception as exc:  # a bug of ours: say so plainly
        if os.environ.get("SERVELAB_DEBUG"):
            traceback.print_exc()
        err.print(line(("internal error:", "bold red"), f" {type(exc).__name__}: {exc}"))
        err.print(line(("hint:", "dim"), " this is a servelab bug; SERVELAB_DEBUG=1 shows the traceback"))
        return 70
    return code if isinstance(code, int) else 0


_RECEIVED: list[str] = []  # the signals this process was stopped by


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a `timeout`, a dropped ssh) stop a command as Ctrl-C does: the run is marked
    interrupted and keeps what it measured. Only in the main thread; the old handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        _RECEIVED.append(signal.Signals(signum).name)
        raise Interrupted(_RECEIVED[-1])

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _interrupted(err: Console, exc: BaseException) -> int:
    kept = list(dict.fromkeys(INTERRUPTED))
    err.print(f"interrupted{f' by {exc.signal_name}' if isinstance(exc, Interrupted) else ''}"
              + "".join(f"; run {r} kept what it measured (servelab runs show {r})" for r in kept))  # fmt: skip
    if isinstance(exc, Interrupted):
        return 128 + int(signal.Signals[exc.signal_name])
    return 130


if __name__ == "__main__":
    sys.exit(main())
