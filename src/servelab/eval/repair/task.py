"""Repo repair: a broken package, visible tests, hidden tests; graded in a fresh copy with the hidden tests put
in only then. A task is a folder under ``eval/repair/tasks/`` (or any folder): ``task.json``, ``repo/`` (what
the agent gets), ``hidden/`` (tests added at grading), ``reference/`` (files that fix ``repo/``).

``task.json`` names what the agent may change (``editable``: folders or files of ``repo/``, by default every
top-level folder but the tests) and may set the harvest caps (``harvest``: any field of
:class:`HarvestRules`). Everything else of the graded tree comes from the task's own files."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.core.errors import UsageError
from servelab.core.known_keys import refuse_unknown
from servelab.eval.repair.harvest import HarvestRules


@dataclass(frozen=True)
class Task:
    name: str
    root: Path
    instructions: str
    tests_dir: str
    traps: dict[str, str]  # test node id -> trap name
    broken_fails: tuple[str, ...]  # the tests the untouched repo must fail (self-check)
    rules: HarvestRules

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def editable(self) -> tuple[str, ...]:
        return self.rules.editable

    @property
    def visible(self) -> set[str]:
        return set(_node_ids(self.repo / self.tests_dir, self.tests_dir))

    @property
    def all_tests(self) -> set[str]:
        return self.visible | set(_node_ids(self.root / "hidden" / self.tests_dir, self.tests_dir))


def _node_ids(folder: Path, prefix: str) -> list[str]:
    """``tests/test_x.py::test_name`` for each top-level test function (what the task's files hold)."""
    out = []
    for path in sorted(folder.glob("test_*.py")):
        for line in path.read_text().splitlines():
            if line.startswith("def test_"):
                out.append(f"{prefix}/{path.name}::{line[4:].split('(')[0]}")
    return out


# the keys of task.json (a key not here is refused with the nearest that is)
TASK_KEYS = ("name", "description", "instructions", "tests_dir", "traps", "broken_fails", "editable", "harvest")


def tasks_root() -> Path:
    return Path(str(resources.files("servelab.eval.repair") / "tasks"))


def builtin_tasks() -> list[str]:
    return sorted(p.name for p in tasks_root().iterdir() if (p / "task.json").is_file())


def load_task(name_or_path: str) -> Task:
    root = Path(name_or_path) if "/" in name_or_path else tasks_root() / name_or_path
    if not (root / "task.json").is_file():
        raise UsageError(f"no repo task {name_or_path!r}", hint=f"one of {', '.join(builtin_tasks())}, or a folder")
    where = str(root / "task.json")
    try:
        raw = json.loads((root / "task.json").read_text())
    except ValueError as exc:
        raise UsageError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{where} is a JSON object, not {type(raw).__name__}")
    refuse_unknown(raw, TASK_KEYS, where)
    for key in ("name", "instructions"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise UsageError(f"{where}: {key!r} is required, as text")
    tests_dir = raw.get("tests_dir", "tests")
    return Task(
        name=raw["name"],
        root=root,
        instructions=raw["instructions"],
        tests_dir=tests_dir,
        traps=dict(raw.get("traps", {})),
        broken_fails=tuple(raw.get("broken_fails", ())),
        rules=_rules(root, tests_dir, raw),
    )


def _rules(root: Path, tests_dir: str, raw: dict[str, Any]) -> HarvestRules:
    editable = raw.get("editable") or sorted(
        p.name for p in (root / "repo").iterdir() if p.is_dir() and p.name != tests_dir and not p.name.startswith(".")
    )
    known = {f.name for f in fields(HarvestRules)} - {"editable"}
    extra = raw.get("harvest", {})
    refuse_unknown(extra, known, f"task {raw.get('name')!r}", section="harvest")
    if any(e.startswith((".", "/")) or ".." in e or e == tests_dir for e in editable):
        raise UsageError(f"task {raw.get('name')!r}: bad editable paths", hint="folders or files inside repo/")
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in extra.items()}
    return HarvestRules(editable=tuple(editable), **values)
