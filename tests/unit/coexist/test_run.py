"""run_coexist's bookkeeping with a scripted probe (the probe is not what is tested): rounds over the conditions,
figures recomputed from the store, and a probe that breaks part-way still leaves what was measured."""

from pathlib import Path

import pytest

from servelab.coexist import CoexistOptions, run_coexist, stored_result
from servelab.coexist.playback import Chunk, Utterance
from servelab.core.store import RunStore
from servelab.load import Target


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


class InterruptedProbe(ScriptedProbe):
    """Ctrl-C (or a SIGTERM turned into one) arrives while the second round runs."""

    async def run(self, utterances: int, condition: str) -> list[Utterance]:
        if len(self.calls) == 1:
            self.calls.append(condition)
            raise KeyboardInterrupt
        return await super().run(utterances, condition)


def test_an_interrupted_run_keeps_the_utterances_it_measured(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as db:
        with pytest.raises(KeyboardInterrupt):
            run_coexist(db, InterruptedProbe(), None, CoexistOptions(conditions=("alone",), repeats=3, utterances=4))
        (info,) = db.list_runs()
        again = stored_result(db, info.run_id)
    assert info.status != "complete"
    assert again.conditions[0].utterances == 4 and again.conditions[0].chunks == 80  # the first round, stored


class FramesProbe(ScriptedProbe):
    """A scripted avatar: 25 frames a second, each frame due and arriving on time (its own figures, frames)."""

    kind = "scripted-frames"

    async def run(self, utterances: int, condition: str) -> list[Utterance]:
        self.calls.append(condition)
        base = 10.0 * len(self.calls)
        return [
            Utterance(base, tuple(Chunk(base + 0.04 * i + 0.001, 0.04, base + 0.04 * i) for i in range(50)), condition)
            for _ in range(utterances)
        ]


def test_two_probes_at_once_keep_their_figures_apart(tmp_path: Path) -> None:
    """The voice runs in every condition, the avatar only where the condition says so; each probe's figures are
    its own (the avatar's frame rate, the voice's audio), and the stored run gives them back the same."""
    voice, avatar = ScriptedProbe(), FramesProbe()
    with RunStore(tmp_path / "s.sqlite") as db:
        options = CoexistOptions(conditions=("alone", "avatar"), repeats=2, utterances=2)
        result = run_coexist(db, [voice, avatar], None, options)
        again = stored_result(db, result.run_id)
    assert voice.calls == ["alone", "avatar", "avatar", "alone"] and avatar.calls == ["avatar", "avatar"]
    by = {(c.condition, c.probe): c for c in result.conditions}
    assert set(by) == {("alone", "scripted"), ("avatar", "scripted"), ("avatar", "scripted-frames")}
    assert by["avatar", "scripted-frames"].min_fps == pytest.approx(25.0) and by["avatar", "scripted"].min_fps is None
    assert by["avatar", "scripted"].chunks == 80 and by["avatar", "scripted-frames"].chunks == 200
    assert by["avatar", "scripted-frames"].meets is True and "fps" in (by["avatar", "scripted-frames"].verdict or "")
    assert [c.model_dump() for c in again.conditions] == [c.model_dump() for c in result.conditions]
    from servelab.report.coexist_plots import interval_series

    series = interval_series(result)  # the plot's curves: the avatar's 40 ms frames apart from the voice's chunks
    assert set(series) == {"alone (scripted)", "avatar (scripted)", "avatar (scripted-frames)"}
    assert len(series["avatar (scripted)"]) == 2 * 2 * 19 and max(series["avatar (scripted)"]) < 11
    assert min(series["avatar (scripted-frames)"]) > 39


def test_conditions_need_what_they_name() -> None:
    from servelab.coexist import parse_condition, with_baselines
    from servelab.core.errors import UsageError

    assert parse_condition("all") == parse_condition("avatar+decode+prefill").__class__(
        "all", companions=True, decode=True, prefill=True
    )
    assert parse_condition("both").baseline == "llm:decode+prefill" and parse_condition("alone").baseline is None
    assert with_baselines(("alone", "avatar", "decode", "prefill", "all")) == (
        "alone", "avatar", "decode", "prefill", "all", "llm:decode", "llm:prefill", "llm:decode+prefill",
    )  # fmt: skip
    for bad in ("loud", "llm:avatar", "llm:", "decode+shout"):
        with pytest.raises(UsageError):
            parse_condition(bad)


def test_the_llm_share_is_against_the_same_load_with_no_probe() -> None:
    """An LLM condition's throughput over its llm: baseline's; the goals then judge the share."""
    from servelab.coexist.goals import Goals, judge
    from servelab.coexist.run import condition_figures
    from servelab.core.records import Labels, RequestRecord

    def rec(condition: str, start: float, tokens: int) -> RequestRecord:
        ns = int(start * 1e9)
        return RequestRecord("r", "chat", sent_ns=ns, first_token_ns=ns + 10_000_000, end_ns=ns + 1_000_000_000,
                             chunk_ns=[ns + 10_000_000, ns + 1_000_000_000], completion_tokens=tokens,
                             labels=Labels(condition=condition))  # fmt: skip

    voice = [Utterance(0.0, tuple(Chunk(0.01 * (i + 1), 0.04) for i in range(20)), c, probe="v")
             for c in ("alone", "prefill")]  # fmt: skip
    records = [rec("prefill", 0.0, 600), rec("llm:prefill", 5.0, 1000)]
    figs = condition_figures(["alone", "prefill", "llm:prefill"], ["v"], voice, records, [0.0, 300.0])
    by = {(f.condition, f.probe): f for f in figs}
    assert by["llm:prefill", ""].utterances == 0 and by["llm:prefill", ""].llm is not None
    share = by["prefill", "v"].llm
    assert share is not None and share.tok_s_share == pytest.approx(0.6)
    judge(figs, Goals())
    assert by["prefill", "v"].meets is False and "kept 60%" in (by["prefill", "v"].verdict or "")
    judge(figs, Goals(llm=0.5))
    assert by["prefill", "v"].meets is True


def test_a_mitigation_repeats_the_probed_llm_conditions_only() -> None:
    from servelab.coexist import Mitigation, mitigated
    from servelab.core.errors import UsageError
    from servelab.load import Target

    gw = Mitigation("gw", Target("gw", "http://127.0.0.1:1/v1", "m"))
    names = ("alone", "avatar", "decode", "all", "llm:decode", "llm:decode+prefill")
    assert mitigated(names, [gw]) == (*names, "gw/decode", "gw/all")
    with pytest.raises(UsageError):
        mitigated(names, [gw, gw])  # two of one name


def test_the_share_counts_tokens_of_requests_cut_off_by_the_stop() -> None:
    """A load whose requests outlast the window (a slow engine, a long answer) finished none; its throughput is
    what streamed over the span it ran, so the share is still given: 30 tokens in 3 s beside the probe, 40 in 2 s
    alone."""
    from servelab.coexist.run import condition_figures
    from servelab.core.records import ErrorClass, Labels, RequestRecord

    def cut(condition: str, start: float, seconds: float, tokens: int) -> RequestRecord:
        ns = int(start * 1e9)
        gap = int(seconds * 1e9) // tokens
        return RequestRecord("r", "chat", sent_ns=ns, first_token_ns=ns + gap, end_ns=ns + int(seconds * 1e9),
                             chunk_ns=[ns + gap * (i + 1) for i in range(tokens)], client_token_count=tokens,
                             error=ErrorClass.CANCELLED, labels=Labels(condition=condition))  # fmt: skip

    voice = [Utterance(0.0, tuple(Chunk(0.01 * (i + 1), 0.04) for i in range(20)), c, probe="v")
             for c in ("alone", "decode")]  # fmt: skip
    records = [cut("decode", 0.0, 3.0, 15), cut("decode", 0.0, 3.0, 15), cut("llm:decode", 9.0, 2.0, 40)]
    figs = condition_figures(["alone", "decode", "llm:decode"], ["v"], voice, records, [0.0])
    by = {(f.condition, f.probe): f for f in figs}
    decode, alone = by["decode", "v"].llm, by["llm:decode", ""].llm
    assert decode is not None and alone is not None and decode.ok == alone.ok == 0
    assert decode.streamed_tok_s == pytest.approx(10.0) and alone.streamed_tok_s == pytest.approx(20.0)
    assert decode.tok_s_share == pytest.approx(0.5)


def test_a_baseline_that_streamed_nothing_gives_no_share() -> None:
    from servelab.core.records import ErrorClass, RequestRecord
    from servelab.core.summary import streamed_tok_s

    silent = RequestRecord("r", "chat", sent_ns=0, end_ns=5_000_000_000, error=ErrorClass.CANCELLED)
    assert streamed_tok_s([silent]) == 0.0
    assert streamed_tok_s([RequestRecord("r", "chat")]) is None  # never sent


def test_the_time_between_rounds_is_not_the_loads() -> None:
    """Two rounds of one condition, 100 s apart: 20 tokens in each 2 s round is 10 tok/s, not 40 over 102 s."""
    from servelab.core.records import ErrorClass, RequestRecord
    from servelab.core.summary import streamed_tok_s

    rounds = [RequestRecord("r", "chat", sent_ns=int(t * 1e9), end_ns=int((t + 2) * 1e9), client_token_count=20,
                            error=ErrorClass.CANCELLED) for t in (0.0, 100.0)]  # fmt: skip
    assert streamed_tok_s(rounds) == pytest.approx(10.0)


def test_a_missed_goal_does_not_hide_the_ones_that_held() -> None:
    from servelab.coexist.goals import _verdict

    text = _verdict(["lateness p99 464.1 ms (alone -32.7, at most 5.0)"], ["the LLM kept 91% of its tok/s (goal 80%)"])
    assert text.startswith("misses: lateness p99 464.1 ms") and "held: the LLM kept 91%" in text
    assert _verdict([], ["0 underruns at 300 ms lookahead"]) == "meets the goals: 0 underruns at 300 ms lookahead"


def test_ttft_counts_requests_cut_off_after_their_first_token() -> None:
    """The slowest first tokens are often the requests the condition's end cut off: their TTFT counts; one still
    waiting is counted apart (its TTFT is longer than the condition)."""
    from servelab.coexist.run import condition_figures
    from servelab.core.records import ErrorClass, Labels, RequestRecord

    def rec(ttft_s: float | None, cut: bool) -> RequestRecord:
        first = None if ttft_s is None else int(ttft_s * 1e9)
        return RequestRecord("r", "chat", sent_ns=0, first_token_ns=first, end_ns=int(5e9),
                             chunk_ns=[first] if first else [], client_token_count=1 if first else 0,
                             completion_tokens=None if cut else 1, error=ErrorClass.CANCELLED if cut else None,
                             labels=Labels(condition="llm:prefill"))  # fmt: skip

    records = [rec(0.1, False), rec(0.2, False), rec(3.0, True), rec(None, True)]
    figs = condition_figures(["llm:prefill"], [], [], records, [0.0])
    llm = figs[0].llm
    assert llm is not None and llm.ok == 2 and llm.cut_before_first_token == 1
    assert llm.ttft_ms["p50"] == pytest.approx(200.0) and llm.ttft_ms["p99"] > 2900  # the cut-off one's 3 s counts


def test_the_llm_table_says_how_many_were_still_waiting() -> None:
    from servelab.coexist.run import condition_figures
    from servelab.core.records import ErrorClass, Labels, RequestRecord
    from servelab.report.coexist_view import llm_table

    done = RequestRecord("r", "chat", sent_ns=0, first_token_ns=10**8, end_ns=10**9, chunk_ns=[10**8],
                         completion_tokens=1, labels=Labels(condition="llm:prefill"))  # fmt: skip
    waiting = RequestRecord("r", "chat", sent_ns=0, end_ns=10**9, error=ErrorClass.CANCELLED,
                            labels=Labels(condition="llm:prefill"))  # fmt: skip
    table = llm_table(condition_figures(["llm:prefill"], [], [], [done, waiting], [0.0]))
    assert table.rows[0][:3] == ["llm:prefill", "1/1\n+1 cut off (1 waiting)", "1"]  # cut off as planned: no failure


@pytest.mark.parametrize("sim", [["--admit-ms", 60_000]], indirect=True)
def test_a_baseline_that_streamed_nothing_is_warned_of(sim: Target, tmp_path: Path) -> None:
    """The fake engine (servelab.testing.engine_sim, not an LLM: a frontend that admits nothing for a minute, which a
    real engine does not do on demand): neither the condition nor its baseline streams a token, so there is no
    share, and the run says why instead of judging the LLM on nothing."""
    from servelab.coexist import LlmLoad

    options = CoexistOptions(conditions=("alone", "decode"), repeats=1, utterances=1, settle_s=0.3,
                             load=LlmLoad(decode_streams=1, decode_tokens=8))  # fmt: skip
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_coexist(db, ScriptedProbe(), sim, options)
    assert result.failed is None
    by = {c.condition: c for c in result.conditions}
    assert by["decode"].llm is not None and by["decode"].llm.tok_s_share is None
    assert by["decode"].llm.cut_before_first_token >= 1
    assert any(w.startswith("llm:decode: the LLM load alone streamed no token") for w in result.warnings)


def test_the_report_sets_the_gpu_during_each_condition_beside_the_probes_lateness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run records each probe segment on the GPU sampler's clock; with samples inside them (NVML read from the
    fake module of tests/unit/test_gpu_telemetry.py, sampled by the probe itself inside its segment: no timing)
    the report has a row per condition: the probe's lateness p99, the GPU's SM busy and power, and each GPU
    process's SM share."""
    from servelab.coexist import run as coexist_run
    from servelab.engines.gpu_telemetry import GpuSampler
    from servelab.report import section
    from tests.unit.test_gpu_telemetry import FakeNvml

    clock, made = [0], []

    class ManualSampler(GpuSampler):
        def __init__(self) -> None:
            super().__init__(nvml=FakeNvml(clock), wall=lambda: 0.0)  # the fake stamps from 0 s
            made.append(self)

        def _loop(self) -> None:  # no ticks of its own: the probe samples inside its segment
            return

    class SamplingProbe(ScriptedProbe):
        async def run(self, utterances: int, condition: str) -> list[Utterance]:
            clock[0] += 10**9  # NVML's per-process samples move on a second a segment
            made[0]._sample_all()
            return await super().run(utterances, condition)

    monkeypatch.setattr(coexist_run, "GpuSampler", ManualSampler)
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_coexist(db, SamplingProbe(), None, CoexistOptions(conditions=("alone",), repeats=2, utterances=2))
        stored = db.summaries(result.run_id)["coexist/gpu"]
        out = section(db, db.get_run(result.run_id), with_plots=False)
    windows = stored["windows"]
    assert [w["condition"] for w in windows] == ["alone", "alone"] and all(w["end_s"] > w["start_s"] for w in windows)
    table = next(t for t in out.tables if t.caption == "The GPU during each condition")
    (row,) = table.rows
    assert row[0] == "alone" and row[1].startswith("scripted: ") and row[1].endswith(" ms")
    assert row[2] == "0: 50%\n1: 51%" and row[3] == "400 W"  # each GPU's SM busy; 300 + 100 W together
    assert "4242 python3.12: 60%" in row[5] and "777 ?: 20%" in row[5]
    assert row[6] == "4"  # two segments, two GPUs: the start's and the stop's samples are outside them
