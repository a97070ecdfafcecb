"""run_coexist's bookkeeping with a scripted probe (the probe is not what is tested): rounds over the conditions,
figures recomputed from the store, and a probe that breaks part-way still leaves what was measured."""

from pathlib import Path

import pytest

from servelab.coexist import CoexistOptions, run_coexist, stored_result
from servelab.coexist.playback import Chunk, Utterance
from servelab.core.store import RunStore


class ScriptedProbe:
    kind = "scripted"

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[str] = []
        self.fail_on = fail_on

    async def start(self) -> dict[str, object]:
        return {"probe": self.kind}

    async def run(self, utterances: int, condition: str) -> list[Utterance]:
        self.calls.append(condition)
        if self.fail_on is not None and len(self.calls) == self.fail_on:
            raise RuntimeError("probe died")
        base = 10.0 * len(self.calls)
        return [
            Utterance(base + u, tuple(Chunk(base + u + 0.01 * (i + 1), 0.04) for i in range(20)), condition)
            for u in range(utterances)
        ]

    async def close(self) -> None:
        pass


def test_conditions_rotate_and_the_store_gives_the_same_figures(tmp_path: Path) -> None:
    probe = ScriptedProbe()
    with RunStore(tmp_path / "s.sqlite") as db:
        # "alone" only, twice, needs no LLM target; rotation is checked on the order of the calls
        result = run_coexist(db, probe, None, CoexistOptions(conditions=("alone",), repeats=3, utterances=2))
        again = stored_result(db, result.run_id)
    assert probe.calls == ["alone"] * 3
    (figs,) = result.conditions
    assert figs.chunks == 120 and figs.pace_rtf == pytest.approx(0.25)
    assert again.conditions[0].model_dump() == figs.model_dump()
    assert any("rests on 120 chunks" in w for w in result.warnings)


def test_a_probe_that_dies_keeps_what_was_measured(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_coexist(db, ScriptedProbe(fail_on=2), None, CoexistOptions(conditions=("alone",), repeats=3))
        info = db.get_run(result.run_id)
        again = stored_result(db, result.run_id)
    assert result.failed == "RuntimeError: probe died"
    assert info.status == "failed"
    assert again.conditions[0].utterances == 10  # the first round, stored
