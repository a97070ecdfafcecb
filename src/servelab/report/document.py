"""A report as one document: its runs' sections, the answer tables first, each verdict once, what failed once.

Which runs: a check brings its steps' runs (the check first); no run named means the newest run, or the check it
is a step of (a check's own run is created first, so the newest run is its last step)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from servelab.core.results import CheckRun, load_result
from servelab.core.store import RunStore
from servelab.report.answers import answer_tables
from servelab.report.model import Section, Table
from servelab.report.sections import section

RECENT_CHECKS = 50  # how far back a step's check is looked for


@dataclass
class Report:
    sections: list[Section]
    answers: list[Table] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # what failed, each said once (not again in a section)
    title: str = "servelab report"


def build_report(
    store: RunStore, run_ids: Sequence[str], notes: Sequence[str] = (), *, with_plots: bool = True
) -> Report:
    """The runs named (with a check's steps), their answers, each verdict and each failure once."""
    sections = [section(store, store.get_run(r), with_plots=with_plots) for r in report_runs(store, run_ids)]
    return assemble(sections, notes)


def assemble(sections: list[Section], notes: Sequence[str] = ()) -> Report:
    """The report of these sections: ``notes`` (what failed besides the runs) and the sections' failures said once
    at the top and not again in a section; a verdict said once."""
    _drop_repeated_verdicts(sections)
    failed = _once([*notes, *(p for s in sections for p in s.problems if _failing(s, p))])
    for s in sections:
        s.problems = [p for p in s.problems if not _said(p, failed)]
    return Report(sections, answer_tables(sections), failed)


def report_runs(store: RunStore, run_ids: Sequence[str]) -> list[str]:
    """The run ids a report shows, in order, each once: a check followed by its steps' runs; 'latest' (or none)
    the newest run, or the check it is a step of."""
    out: list[str] = []
    for asked in run_ids or ["latest"]:
        info = store.get_run(asked)
        run_id = _check_of(store, info.run_id) if asked == "latest" else info.run_id
        out += [r for r in [run_id, *_steps(store, run_id)] if r not in out]
    return out


def _steps(store: RunStore, run_id: str) -> list[str]:
    result = load_result(store, store.get_run(run_id))
    return [s.run_id for s in result.steps if s.run_id] if isinstance(result, CheckRun) else []


def _check_of(store: RunStore, run_id: str) -> str:
    for info in store.list_runs(limit=RECENT_CHECKS):
        if info.kind == "check" and run_id in _steps(store, info.run_id):
            return info.run_id
    return run_id


def _drop_repeated_verdicts(sections: list[Section]) -> None:
    """A check's section repeats its steps' verdicts only where the steps' sections are absent; a verdict said by
    two runs is kept by the first."""
    shown = {s.run_id for s in sections}
    seen: set[str] = set()
    for s in sections:
        if isinstance(s.result, CheckRun) and all(st.run_id in shown for st in s.result.steps if st.run_id):
            s.verdicts, s.evidence = [], {}
        s.verdicts = [v for v in s.verdicts if not (v in seen or seen.add(v))]  # type: ignore[func-returns-value]


def _failing(s: Section, problem: str) -> bool:
    """Problems worth the top of the report: a run that did not complete, or requests that failed."""
    return s.status != "complete" or "failed" in problem or "stopped early" in problem or isinstance(s.result, CheckRun)


_PREFIX = re.compile(r"^(?:FAILED|requests failed|plan|bench|eval|coexist|check|\w+ \d{8}-\d{6}\S*): ")


def _core(text: str) -> str:
    while (m := _PREFIX.match(text)) is not None:
        text = text[m.end() :]
    return text


def _said(line: str, kept: Sequence[str]) -> bool:
    """``line`` says what a kept line says (one holds the other, prefixes like "bench: " aside)."""
    core = _core(line)
    return any(core in k or _core(k) in line for k in kept)


def _once(lines: Sequence[str]) -> list[str]:
    kept: list[str] = []
    for line in lines:
        if not _said(line, kept):
            kept.append(line)
    return kept
