"""Take the agent's changes out of its folder without touching that folder as a privileged process: the
walk runs as the sandbox user inside the sandbox (:mod:`._harvest_child`), and servelab only reads the tar it
writes to a pipe, checking each member again before writing it into a tree servelab made itself."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.eval.sandbox import Limits, run, seen_as

CHILD = (Path(__file__).parent / "_harvest_child.py").read_text()
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+\-]{0,127}", re.ASCII)
RUNNER_FILES = ("conftest.py", "pytest.ini", "pytest.toml", ".pytest.ini", ".pytest.toml", "tox.ini", "setup.cfg",
                "pyproject.toml", "sitecustomize.py", "usercustomize.py")  # fmt: skip
SUFFIXES = (".py", ".json", ".txt", ".csv", ".md", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".rst")


@dataclass(frozen=True)
class HarvestRules:
    """What of the agent's folder is taken: regular files under the editable paths, of these kinds, within caps.
    A task may change any of them in its task.json ("harvest": {...})."""

    editable: tuple[str, ...]
    suffixes: tuple[str, ...] = SUFFIXES
    runner_files: tuple[str, ...] = RUNNER_FILES
    max_files: int = 500
    max_file_bytes: int = 1 << 20
    max_total_bytes: int = 16 << 20
    max_depth: int = 16
    max_entries: int = 20_000

    def to_json(self, original: Sequence[str] = ()) -> str:
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}
        return json.dumps({**values, "original": list(original), "name_pattern": NAME.pattern})


@dataclass
class Harvest:
    files: dict[str, bytes] = field(default_factory=dict)
    dropped: list[dict[str, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # the harvest itself failed: nothing can be graded

    def to_dict(self) -> dict[str, Any]:
        return {"taken": sorted(self.files), "dropped": self.dropped, "dropped_counts": self.counts,
                "error": self.error}  # fmt: skip


def harvest(workdir: Path, rules: HarvestRules, kind: str, original: Sequence[str] = ()) -> Harvest:
    """The editable files of ``workdir`` as the sandbox user sees them, read-only. Top-level names that are
    neither editable nor in ``original`` (the task's own top level) are listed as dropped."""
    cap = rules.max_total_bytes + rules.max_files * 3 * 512 + (1 << 20)
    argv = ["python", "-I", "-B", "-c", CHILD, seen_as(workdir, kind), rules.to_json(original)]
    limits = Limits(timeout_s=60, output_bytes=cap, memory_mb=1024)
    result = run(argv, workdir, kind=kind, limits=limits, read_only=True)
    out = Harvest()
    report = _last_json(result.stderr)
    if result.timed_out or result.returncode != 0 or report is None:
        why = "timed out" if result.timed_out else f"exit {result.returncode}: {result.stderr.strip()[-300:]}"
        out.error = f"could not read the agent's folder ({why})"
        return out
    out.dropped, out.counts = list(report["dropped"]), dict(report["counts"])
    if report.get("stopped"):
        out.counts[report["stopped"]] = 1
    _untar(result.raw_stdout, rules, out)
    return out


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                got = json.loads(line)
            except ValueError:
                return None
            return got if isinstance(got, dict) else None
    return None


def _untar(data: bytes, rules: HarvestRules, out: Harvest) -> None:
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                reason = _refuse(member, rules, total, len(out.files))
                if reason:
                    out.dropped.append({"path": ascii(member.name)[1:-1], "reason": reason})
                    out.counts[reason] = out.counts.get(reason, 0) + 1
                    continue
                f = tar.extractfile(member)
                content = f.read(rules.max_file_bytes + 1) if f else b""
                out.files[member.name] = content
                total += len(content)
    except (tarfile.TarError, OSError, EOFError) as exc:
        out.error = f"unreadable harvest: {exc}"


def _refuse(member: tarfile.TarInfo, rules: HarvestRules, total: int, count: int) -> str | None:
    parts = member.name.split("/")
    if not member.isreg():
        return "not a regular file"
    if not all(NAME.fullmatch(p) for p in parts) or not any(
        member.name == e or member.name.startswith(e.rstrip("/") + "/") for e in rules.editable
    ):
        return "outside the editable paths"
    if member.size > rules.max_file_bytes or total + member.size > rules.max_total_bytes or count >= rules.max_files:
        return "over the caps"
    return None


def write_tree(dest: Path, files: dict[str, bytes]) -> None:
    """Write harvested files under ``dest`` (a folder servelab made): new files only, never through a link."""
    for rel, content in sorted(files.items()):
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
