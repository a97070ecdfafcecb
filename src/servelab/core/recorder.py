"""One stored run from its opening to its finish, for every capability: records go into the store as they
finish (a run cut short keeps what it measured), named summaries as they are known, and the end says the status
and, for a failure, what stopped it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from servelab.core.errors import Interrupted
from servelab.core.records import RequestRecord
from servelab.core.results import RunResult, save_result
from servelab.core.store import STATUS_COMPLETE, STATUS_FAILED, STATUS_INTERRUPTED, RunStore

INTERRUPTED: list[str] = []  # runs this process marked interrupted, so the CLI can say which it kept


class RunRecorder:
    def __init__(
        self,
        store: RunStore,
        kind: str,
        manifest: dict[str, Any],
        on_record: Callable[[RequestRecord], None] | None = None,
        resume: str | None = None,
    ) -> None:
        """A new run of ``kind``; with ``resume``, that stored run reopened (running again, what it holds kept)."""
        self.store, self.on_record, self.manifest = store, on_record, manifest
        if resume is None:
            self.run_id = store.create_run(kind, manifest)
        else:
            store.reopen_run(resume)
            self.run_id = resume
        self.finished: str | None = None
        self.current: RunResult | None = None

    def sink(self, record: RequestRecord) -> None:
        """Store one finished request (and pass it to ``on_record``: a progress line, a live table)."""
        self.store.add_record(self.run_id, record)
        if self.on_record is not None:
            self.on_record(record)

    def note(self, key: str, name: str, value: Any) -> None:
        """``manifest[key][name] = value``, stored at once (what a step learnt of the run's setting)."""
        self.manifest.setdefault(key, {})[name] = value
        self.store.set_manifest(self.run_id, self.manifest)

    def summary(self, name: str, data: dict[str, Any]) -> None:
        """Raw material kept beside the result (an eval's items, so it can be graded again)."""
        self.store.put_summary(self.run_id, name, data)

    def result(self, result: RunResult) -> None:
        """Store the run's typed result whole (again as it grows: a run cut short keeps the last one)."""
        if self.finished is not None:
            result = result.model_copy(update={"status": self.finished})
        self.current = result
        save_result(self.store, self.run_id, result)

    def finish(self, status: str = STATUS_COMPLETE, error: str | None = None) -> None:
        """Once: later calls keep the first status."""
        if self.finished is None:
            self.finished = status
            self.store.finish_run(self.run_id, status, error)
            if self.current is not None:
                update = {"status": status, "error": error or self.current.error}
                save_result(self.store, self.run_id, self.current.model_copy(update=update))
            if status == STATUS_INTERRUPTED:
                INTERRUPTED.append(self.run_id)

    def fail(self, exc: BaseException) -> None:
        """Finish for what stopped it: interrupted (Ctrl-C, a signal) or failed with the exception said."""
        if isinstance(exc, KeyboardInterrupt | Interrupted):
            self.finish(STATUS_INTERRUPTED, describe(exc))
        else:
            self.finish(STATUS_FAILED, describe(exc))


def describe(exc: BaseException) -> str:
    if isinstance(exc, Interrupted):
        return f"interrupted by {exc.signal_name}"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@contextmanager
def recording(
    store: RunStore,
    kind: str,
    manifest: dict[str, Any],
    on_record: Callable[[RequestRecord], None] | None = None,
) -> Iterator[RunRecorder]:
    """The run is complete when the block ends, failed (with the exception said) when it raises, interrupted
    when Ctrl-C or a signal stops it; the exception goes on."""
    recorder = RunRecorder(store, kind, manifest, on_record)
    try:
        yield recorder
    except BaseException as exc:
        recorder.fail(exc)
        raise
    recorder.finish(STATUS_COMPLETE)
