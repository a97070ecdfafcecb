"""A coexist load is cancelled at the end of each load window, as planned: the requests cut off then are classed
apart (cut off, not failed), never in "requests failed", and the LLM's ok/n leaves them out. Run for real against
the fake engine (servelab.testing.engine_sim, not an LLM: 64-token answers at 5 ms a step, so a window of a second
always ends with requests in flight)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from servelab.coexist import CoexistOptions, LlmLoad, run_coexist
from servelab.coexist.playback import Chunk, Utterance
from servelab.core.records import ErrorClass
from servelab.core.results import CoexistRun, load_result
from servelab.core.store import RunStore
from servelab.load import Target
from servelab.report.sections import section as run_section


class SlowProbe:
    """Speaks for a second per condition (its chunks scripted): the LLM load runs that long beside it."""

    kind = "slow"

    async def start(self) -> dict[str, object]:
        return {"probe": self.kind}

    async def run(self, utterances: int, condition: str) -> list[Utterance]:
        await asyncio.sleep(1.0)
        return [Utterance(float(u), tuple(Chunk(u + 0.01 * (i + 1), 0.04) for i in range(20)), condition)
                for u in range(utterances)]  # fmt: skip

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("sim", [["--max-running", 8, "--step-ms", 5]], indirect=True)
def test_the_loads_planned_cancellations_are_not_failures(sim: Target, tmp_path: Path) -> None:
    options = CoexistOptions(conditions=("alone", "decode"), repeats=2, utterances=1, settle_s=0.3,
                             load=LlmLoad(decode_streams=2, decode_tokens=64), baseline_s=1.0)  # fmt: skip
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_coexist(db, SlowProbe(), sim, options)
        records = db.records(result.run_id)
        stored = load_result(db, db.get_run(result.run_id))
        section = run_section(db, db.get_run(result.run_id), with_plots=False)
    cut = [r for r in records if r.error == ErrorClass.CANCELLED]
    assert cut and all(r.error in (None, ErrorClass.CANCELLED) for r in records)  # nothing but the planned stops
    assert len(cut) < len(records)
    assert isinstance(stored, CoexistRun) and stored.request_failures() == []
    facts = dict(section.facts)
    assert facts["requests failed"] == f"0 of {len(records) - len(cut)} (0.0%)", facts
    assert facts["requests cut off"].startswith(f"{len(cut)}, as planned"), facts
    by = {c.condition: c for c in stored.conditions}
    for name in ("decode", "llm:decode"):
        llm = by[name].llm
        assert llm is not None and "cancelled" not in llm.failures and llm.cancelled >= 1
        assert llm.cancelled == sum(r.labels.condition == name for r in cut)
    assert not any("FAILED" in p for p in section.problems), section.problems
    kept = by["decode"].llm
    assert kept is not None and len(kept.rounds_tok_s) == 2  # one rate per round: the share's interval
    assert kept.tok_s_share_low is not None and kept.tok_s_share_high is not None
    text = " ".join(section.verdicts)
    assert all(int(p) <= 100 for p in re.findall(r"(\d+)%(?! of a core)", text)), text
