"""The run store: SQLite, migrations as an append-only list, records written as they finish."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.core.errors import StoreError, UsageError
from servelab.core.paths import servelab_home
from servelab.core.records import ErrorClass, RequestRecord

# Append only. Never edit a migration that has shipped; add a new one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        run_id      TEXT PRIMARY KEY,
        kind        TEXT NOT NULL,
        created_at  REAL NOT NULL,
        finished_at REAL,
        status      TEXT NOT NULL,
        manifest    TEXT NOT NULL
    );
    CREATE TABLE records (
        run_id     TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        seq        INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        target     TEXT NOT NULL,
        scenario   TEXT NOT NULL,
        error      TEXT,
        data       TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE summaries (
        run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        name   TEXT NOT NULL,
        data   TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    """,
    # 2: what stopped a failed run, said once at its finish
    "ALTER TABLE runs ADD COLUMN error TEXT;",
    # 3: the run's typed result (servelab.core.results), stored whole and replaced as the run grows
    """
    CREATE TABLE results (
        run_id  TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
        kind    TEXT NOT NULL,
        version INTEGER NOT NULL,
        data    TEXT NOT NULL
    );
    """,
)

STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or SIGHUP: what was measured is kept


def new_run_id(now: float | None = None) -> str:
    """``YYYYMMDD-HHMMSS.mmm-xxxxxx``: local time to the millisecond, then 6 random hex digits, so runs started in
    one second read apart and sort by when they started (ids of older servelab, ``YYYYMMDD-HHMMSS-xxxxxx``, still
    resolve: a run is found by any unique prefix of its id)."""
    now = time.time() if now is None else now
    millis = int(now * 1000) % 1000
    return f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}.{millis:03d}-{uuid.uuid4().hex[:6]}"


def default_store_path() -> Path:
    """``$SERVELAB_STORE``, else ``<servelab home>/runs.sqlite``."""
    explicit = os.environ.get("SERVELAB_STORE")
    return Path(explicit) if explicit else servelab_home() / "runs.sqlite"


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    kind: str
    created_at: float
    finished_at: float | None
    status: str
    manifest: dict[str, Any]
    record_count: int
    error: str | None = None  # what stopped it, for a failed run


class RunStore:
    """A SQLite file of runs. Each write commits at once, so a killed run keeps what it wrote; a run's result and its
    finish are also checkpointed from the write-ahead log into the file, so a copy of the file alone (without its
    ``-wal``) holds every stored result."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open run store {self.path}: {exc}") from exc

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        self._check_version()
        if self.schema_version == len(MIGRATIONS):
            return
        with _migration_lock(self.path):  # two processes opening a new store: one migrates, the other then sees it
            current = self._check_version()
            for version, script in enumerate(MIGRATIONS[current:], start=current + 1):
                self._db.executescript(f"BEGIN;\n{script}\nPRAGMA user_version = {version};\nCOMMIT;")

    def _check_version(self) -> int:
        current = self.schema_version
        if current > len(MIGRATIONS):
            raise StoreError(
                f"run store {self.path} has schema {current}, newer than this servelab knows ({len(MIGRATIONS)})",
                hint="upgrade servelab, or point SERVELAB_HOME at another folder",
            )
        return current

    # -- writing -----------------------------------------------------------------------------
    def create_run(self, kind: str, manifest: dict[str, Any], run_id: str | None = None) -> str:
        run_id = run_id or new_run_id()
        self._db.execute(
            "INSERT INTO runs (run_id, kind, created_at, status, manifest) VALUES (?, ?, ?, ?, ?)",
            (run_id, kind, time.time(), STATUS_RUNNING, json.dumps(manifest)),
        )
        return run_id

    def set_manifest(self, run_id: str, manifest: dict[str, Any]) -> None:
        """The run's manifest, grown by what the run learnt as it went (a Ray step's clock offsets)."""
        self._db.execute("UPDATE runs SET manifest = ? WHERE run_id = ?", (json.dumps(manifest), run_id))

    def add_record(self, run_id: str, record: RequestRecord) -> None:
        self._db.execute(
            "INSERT INTO records (run_id, seq, request_id, target, scenario, error, data) "
            "VALUES (?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM records WHERE run_id = ?), ?, ?, ?, ?, ?)",
            (
                run_id,
                run_id,
                record.request_id,
                record.target,
                record.scenario,
                record.error.value if record.error else None,
                json.dumps(record.to_dict()),
            ),
        )

    def put_summary(self, run_id: str, name: str, data: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO summaries (run_id, name, data) VALUES (?, ?, ?)",
            (run_id, name, json.dumps(data)),
        )

    def put_result(self, run_id: str, kind: str, version: int, data: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO results (run_id, kind, version, data) VALUES (?, ?, ?, ?)",
            (run_id, kind, version, data),
        )
        self._checkpoint()

    def _checkpoint(self) -> None:
        """Best effort: a reader holding an old snapshot leaves the rest to the next checkpoint (PASSIVE)."""
        self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def reopen_run(self, run_id: str) -> None:
        """A run resumed (a sweep after an interrupt): running again, its finish and error cleared, what it stored
        kept."""
        self._db.execute(
            "UPDATE runs SET status = ?, finished_at = NULL, error = NULL WHERE run_id = ?", (STATUS_RUNNING, run_id)
        )

    def finish_run(self, run_id: str, status: str = STATUS_COMPLETE, error: str | None = None) -> None:
        self._db.execute(
            "UPDATE runs SET status = ?, finished_at = ?, error = ? WHERE run_id = ?",
            (status, time.time(), error, run_id),
        )
        self._checkpoint()

    # -- reading -----------------------------------------------------------------------------
    def list_runs(self, limit: int | None = None) -> list[RunInfo]:
        sql = (
            "SELECT r.run_id, r.kind, r.created_at, r.finished_at, r.status, r.manifest, "
            "(SELECT COUNT(*) FROM records x WHERE x.run_id = r.run_id), r.error FROM runs r "
            "ORDER BY r.created_at DESC, r.run_id DESC"
        )
        rows = self._db.execute(sql + (f" LIMIT {int(limit)}" if limit else "")).fetchall()
        return [_run_info(row) for row in rows]

    def get_run(self, run_id: str, kinds: Collection[str] | None = None) -> RunInfo:
        """The run ``run_id`` names: an id, a unique prefix, or ``latest``: the newest run that is no part of
        another (a sweep stores a bench and an eval run per point after itself, a check its steps; they are named
        by id). With ``kinds``, only runs of those kinds are named: ``latest`` is the newest of them, and a prefix
        or id of another kind's run is refused as that."""
        runs = self.list_runs()
        if run_id == "latest":
            matches = [r for r in runs if not _part_of_another(r)]
        else:
            matches = [r for r in runs if r.run_id.startswith(run_id)]
        wanted = [r for r in matches if kinds is None or r.kind in kinds]
        if not wanted:
            if matches and run_id != "latest":
                other = matches[0]
                raise UsageError(f"run {other.run_id} is a {other.kind} run, not a {' or '.join(kinds or ())} run",
                                 hint="`servelab runs list` shows the runs and their kinds")  # fmt: skip
            what = f" ({', '.join(kinds)})" if kinds else ""
            raise StoreError(f"no run {run_id!r}{what} in {self.path}", hint="`servelab runs list` shows the runs")
        if run_id == "latest":
            return wanted[0]
        exact = [r for r in wanted if r.run_id == run_id]
        if len(wanted) > 1 and not exact:
            raise StoreError(f"{run_id!r} matches {len(wanted)} runs; give more of the id")
        return exact[0] if exact else wanted[0]

    def records(self, run_id: str) -> list[RequestRecord]:
        return list(self.iter_records(run_id))

    def iter_records(self, run_id: str) -> Iterator[RequestRecord]:
        rows = self._db.execute("SELECT data FROM records WHERE run_id = ? ORDER BY seq", (run_id,))
        for (data,) in rows:
            yield RequestRecord.from_dict(json.loads(data))

    def failed_count(self, run_id: str) -> int:
        """Records of the run whose request failed; a request the run itself cut off (``cancelled``: a coexist load
        stopped at the end of its window, as planned) is not a failure (:meth:`cancelled_count`)."""
        row = self._db.execute(
            "SELECT COUNT(*) FROM records WHERE run_id = ? AND error IS NOT NULL AND error != ?",
            (run_id, ErrorClass.CANCELLED.value),
        )
        return int(row.fetchone()[0])

    def cancelled_count(self, run_id: str) -> int:
        """Records of the run's requests that the run itself cut off (the end of a load window)."""
        row = self._db.execute(
            "SELECT COUNT(*) FROM records WHERE run_id = ? AND error = ?", (run_id, ErrorClass.CANCELLED.value)
        )
        return int(row.fetchone()[0])

    def result(self, run_id: str) -> tuple[str, int, str] | None:
        """(kind, version, JSON) of the run's stored result, if it has one."""
        row = self._db.execute("SELECT kind, version, data FROM results WHERE run_id = ?", (run_id,)).fetchone()
        return (str(row[0]), int(row[1]), str(row[2])) if row else None

    def summaries(self, run_id: str) -> dict[str, dict[str, Any]]:
        rows = self._db.execute("SELECT name, data FROM summaries WHERE run_id = ? ORDER BY name", (run_id,))
        return {name: json.loads(data) for name, data in rows}


def _part_of_another(info: RunInfo) -> bool:
    """A run made as one part of another: a sweep point's bench or eval run, a check's step."""
    args = info.manifest.get("args") if isinstance(info.manifest, dict) else None
    return isinstance(args, dict) and ("sweep_point" in args or "check_step" in args)


@contextmanager
def _migration_lock(path: Path) -> Iterator[None]:
    with open(f"{path}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_info(row: Sequence[Any]) -> RunInfo:
    run_id, kind, created, finished, status, manifest, count, error = row
    return RunInfo(run_id, kind, created, finished, status, json.loads(manifest), int(count), error)
