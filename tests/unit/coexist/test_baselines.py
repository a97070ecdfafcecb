"""What a condition is judged against: the LLM's share is the lower of its output and prompt token rates' shares,
and a mitigation run on a server of its own is judged against a plain run's baselines (rebase), so a mitigation
whose cost is already in its own baselines shows it. Records and utterances are written by hand (known figures)."""

from dataclasses import replace
from pathlib import Path

import pytest

from servelab.coexist import CoexistOptions, CoexistResult, rebase, run_coexist, stored_result
from servelab.coexist.goals import Goals, judge
from servelab.coexist.playback import Chunk, Utterance
from servelab.coexist.run import condition_figures
from servelab.core.records import Labels, RequestRecord
from servelab.core.store import RunStore


def rec(condition: str, start: float, seconds: float, prompt: int, out: int) -> RequestRecord:
    ns, span = int(start * 1e9), int(seconds * 1e9)
    return RequestRecord("r", "chat", sent_ns=ns, first_token_ns=ns + span // 2, end_ns=ns + span,
                         chunk_ns=[ns + span // 2, ns + span], prompt_tokens=prompt, completion_tokens=out,
                         labels=Labels(condition=condition))  # fmt: skip


def voice(condition: str, chunk_s: float, late_s: float = 0.0) -> Utterance:
    """20 chunks of 40 ms of audio, one every ``chunk_s``, the first ``late_s`` after the utterance was due."""
    return Utterance(0.0, tuple(Chunk(late_s + chunk_s * (i + 1), 0.04) for i in range(20)), condition, probe="v")


def result(run_id: str, utterances: list[Utterance], records: list[RequestRecord]) -> CoexistResult:
    names = list(dict.fromkeys([u.condition for u in utterances] + [r.labels.condition for r in records]))
    figs = condition_figures(names, ["v"], utterances, records, [0.0, 300.0])
    judge(figs, Goals())
    return CoexistResult(run_id, {}, {}, figs, utterances, goals=Goals().as_dict())


def test_a_prefill_load_that_lost_half_its_prompt_rate_kept_half() -> None:
    """Beside the probe the long prompts took twice as long; each still answered its 8 tokens, so the output rate
    alone would say 50%... and with one 8-token answer per prompt the output rate halves with it. Where the output
    rate holds (more, shorter answers) the prompt rate still tells: the share is the lower of the two."""
    records = [rec("llm:prefill", 100.0, 2.0, 32000, 8), rec("prefill", 0.0, 2.0, 16000, 8)]
    by = {f.condition: f for f in result("r", [voice("alone", 0.01), voice("prefill", 0.01)], records).conditions}
    llm = by["prefill"].llm
    assert llm is not None and llm.output_share == pytest.approx(1.0) and llm.prompt_share == pytest.approx(0.5)
    assert llm.tok_s_share == pytest.approx(0.5)
    assert by["prefill"].meets is False and "kept 50%" in (by["prefill"].verdict or "")


def test_a_voice_that_waits_a_second_for_its_turn_misses_even_at_its_pace() -> None:
    """Same pace once it speaks, no underrun at 300 ms lookahead, but its first audio a second late."""
    by = {f.condition: f for f in result("r", [voice("alone", 0.01), voice("avatar", 0.01, 1.0)], []).conditions}
    assert by["avatar"].lag_p99_ms == pytest.approx(by["alone"].lag_p99_ms)
    late, alone = by["avatar"].lateness_p99_ms, by["alone"].lateness_p99_ms
    assert late is not None and alone is not None and late - alone == pytest.approx(1000.0)  # the wait, on every chunk
    said = by["avatar"].verdict or ""
    assert by["avatar"].meets is False and said.startswith("misses: lateness max 1,0"), said  # 20 chunks: no p99
    assert " ms (n=20)" in said


def test_a_mitigation_is_judged_against_the_plain_servers_baselines() -> None:
    """Smaller batches: beside the voice the LLM keeps all it does alone on that server, but alone that server
    takes 32K prompts at a quarter of the plain server's rate; and its voice alone is slower than the plain one's."""
    plain = result("plain", [voice("alone", 0.01)], [rec("llm:prefill", 100.0, 2.0, 32000, 8)])
    small = result(
        "small",
        [voice("alone", 0.02, 0.3), voice("prefill", 0.02, 0.3)],
        [rec("llm:prefill", 100.0, 8.0, 32000, 8), rec("prefill", 0.0, 8.0, 32000, 8)],
    )
    own = {f.condition: f for f in small.conditions}
    assert own["prefill"].meets is True  # against its own baselines: nothing lost
    judged = rebase(small, plain)
    by = {f.condition: f for f in judged.conditions}
    assert judged.reference == "plain" and by["prefill"].llm is not None
    assert by["prefill"].llm.tok_s_share == pytest.approx(0.25)
    assert by["prefill"].llm.ttft_p50_alone_ms == pytest.approx(1000.0)
    assert by["prefill"].meets is False and by["alone"].meets is False  # its voice alone is late against plain
    assert own["prefill"].meets is True  # the run given is not changed
    no_llm = rebase(small, result("voice only", [voice("alone", 0.01)], []))  # a reference with no llm:prefill
    assert next(c.llm for c in no_llm.conditions if c.condition == "prefill").tok_s_share is None  # not its own


def test_a_stored_run_is_judged_again_against_its_reference(tmp_path: Path) -> None:
    class Voice:
        kind = "v"

        def __init__(self, late_s: float) -> None:
            self.late_s = late_s

        async def start(self) -> dict[str, object]:
            return {}

        async def run(self, utterances: int, condition: str) -> list[Utterance]:
            return [voice(condition, 0.01, self.late_s) for _ in range(utterances)]

        async def close(self) -> None:
            pass

    options = CoexistOptions(conditions=("alone",), repeats=1, utterances=2)
    with RunStore(tmp_path / "s.sqlite") as db:
        plain = run_coexist(db, Voice(0.0), None, options)
        slow = run_coexist(db, Voice(0.5), None, replace(options, reference=plain))
        again = stored_result(db, slow.run_id)
    assert slow.reference == again.reference == plain.run_id
    assert slow.conditions[0].meets is False and (slow.conditions[0].verdict or "").startswith(
        "misses: lateness max 510.0 ms (n=40) (alone 10.0"  # 40 chunks: the largest, not a p99
    )
    assert [c.model_dump() for c in again.conditions] == [c.model_dump() for c in slow.conditions]
