"""One base exception for everything servelab raises on purpose."""

from __future__ import annotations


class Interrupted(KeyboardInterrupt):
    """A signal asked the run to stop (SIGTERM, SIGHUP); a KeyboardInterrupt, so the event loop lets it out at once
    from a task or a callback (another BaseException would be kept on the task, or logged, and the run go on)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class ServelabError(Exception):
    """A failure with a message meant for the person running servelab.

    The CLI prints ``str(error)`` (and ``hint`` when set) and exits with ``exit_code``,
    never a traceback.
    """

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(ServelabError):
    """Bad input from the user: a wrong argument, a missing file, an unknown name."""

    exit_code = 2


class EngineError(ServelabError):
    """The embedded engine could not be installed, started, reached or stopped."""


class StoreError(ServelabError):
    """The run store could not be opened, migrated or read."""
