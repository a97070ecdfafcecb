"""Session workloads against the prefix-cache truth fixture (servelab.testing.cache_sim: a cache of known capacity
with LRU eviction, TTFT a known function of the uncached tokens): each later turn finds the previous prompt and the
reply the model streamed in the cache, to the block; the per-turn figures are those of the records; the capacity
search finds the session count the fixture's capacity holds, and no more."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from statistics import median

import pytest

from servelab.bench import Load, parse_slo, run_bench, search_slo
from servelab.cli import main
from servelab.core.export import export_run
from servelab.core.records import RequestRecord
from servelab.core.store import RunStore
from servelab.load.runner import CHAT_MARGIN, Target
from servelab.load.sessions import SessionSpec, of_spec, session_script
from servelab.load.sessions.run import Texts, start_conversation, turn_prompt
from servelab.load.sessions.scenario import with_session_options
from servelab.testing.cache_sim import render

BLOCK = 16
BASE_MS, PER_TOKEN_MS = 2.0, 0.5
SIM = ["--base-ms", BASE_MS, "--per-token-ms", PER_TOKEN_MS, "--step-ms", 0.5, "--capacity-blocks", 100_000]


def _spec(**over: object) -> SessionSpec:
    raw: dict[str, object] = {"name": "truth", "sessions": 2, "turns": 4, "head_tokens": 800, "turn_tokens": [40, 120],
                              "output_tokens": [8, 24], "tool_share": 0.5, "summary_tokens": 100}  # fmt: skip
    return SessionSpec.model_validate(raw | over)


def _expected_cached(before: RequestRecord, now: RequestRecord) -> int:
    """What a cache holding everything serves: the previous prompt and its reply, in whole blocks, never the last
    prompt token."""
    assert before.prompt_tokens and before.completion_tokens and now.prompt_tokens
    common = min(before.prompt_tokens + before.completion_tokens, now.prompt_tokens - 1)
    return common // BLOCK * BLOCK


@pytest.mark.parametrize("cache_sim", [SIM], indirect=True)
def test_later_turns_find_the_history_and_the_streamed_reply_in_the_cache(cache_sim: Target, tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_bench(db, [cache_sim], [of_spec(_spec())], Load(warmup=1))
        exported = export_run(db, result.run_id)
    turns = sorted(result.records, key=lambda r: (r.labels.session, r.labels.turn))
    assert [(r.labels.session, r.labels.turn) for r in turns] == [(s, t) for s in (0, 1) for t in (1, 2, 3, 4)]
    assert all(r.ok for r in turns)
    for before, now in itertools.pairwise(turns):
        if now.labels.session != before.labels.session:
            assert now.cached_tokens == 0  # a session's own head: nothing of another's
            continue
        assert now.cached_tokens == _expected_cached(before, now)
        uncached = (now.prompt_tokens or 0) - (now.cached_tokens or 0)
        assert (now.first_token_ns or 0) - (now.sent_ns or 0) >= (BASE_MS + PER_TOKEN_MS * uncached) * 1e6
    figures = result.stored.steps[0].sessions
    assert figures is not None and (figures.sessions, figures.turns, figures.ok) == (2, 8, 8)
    for row in figures.per_turn:
        mine = [r for r in turns if r.labels.turn == row.turn]
        assert row.cached_tokens_p50 == median(r.cached_tokens or 0 for r in mine)
        assert row.prompt_tokens_p50 == median(r.prompt_tokens or 0 for r in mine)
    cached, prompt = sum(r.cached_tokens or 0 for r in turns), sum(r.prompt_tokens or 0 for r in turns)
    assert figures.hit_share == pytest.approx(cached / prompt)
    assert figures.later_turn_ttft_ms_p50 is not None and figures.first_turn_ttft_ms_p50 is not None
    assert figures.later_turn_ttft_ms_p50 < figures.first_turn_ttft_ms_p50  # 800 tokens cold, tens warm
    assert [o.turns for o in figures.per_session] == [4, 4] and figures.duration_s_p50
    assert figures.engine["preemptions"] == 0
    records = exported["records"]
    assert {(r["labels"]["session"], r["labels"]["turn"]) for r in records} == {(s, t) for s in (0, 1) for t in
                                                                                  range(1, 5)}  # fmt: skip
    assert [r["cached_tokens"] for r in records] == [r.cached_tokens for r in result.records]
    assert exported["result"]["steps"][0]["sessions"]["turns"] == 8


@pytest.mark.parametrize("cache_sim", [SIM], indirect=True)
def test_a_ramp_spreads_the_first_turns_and_no_later_one(cache_sim: Target, tmp_path: Path) -> None:
    """--ramp 0.6 over 3 sessions: first turns due 0, 200 and 400 ms after the step's start (to the nanosecond, as
    scheduled) and none sent before it is due; later turns keep their think time alone."""
    spec = _spec(sessions=3, turns=2, think_time_s=0.0)
    scenario = with_session_options([of_spec(spec)], sessions=None, turns=None, think_time=None, ramp=0.6)[0]
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_bench(db, [cache_sim], [scenario], Load(warmup=0))
    first = sorted((r for r in result.records if r.labels.turn == 1), key=lambda r: r.labels.session or 0)
    due = [r.scheduled_ns or 0 for r in first]
    assert [d - due[0] for d in due] == [0, 200_000_000, 400_000_000]
    assert all((r.sent_ns or 0) >= (r.scheduled_ns or 0) for r in first)  # never early
    later = [r for r in result.records if r.labels.turn == 2]
    assert len(later) == 3 and all(r.ok for r in result.records)


def test_a_ramp_is_checked_before_any_server_is_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--target", "x=http://127.0.0.1:9", "--scenario", "code-chat", "--ramp", "5"]) == 2
    assert "need a session scenario" in capsys.readouterr().err
    assert main(["bench", "--target", "x=http://127.0.0.1:9", "--scenario", "agentic-coding", "--ramp", "-1"]) == 2
    assert "'--ramp': Input should be greater than or equal to 0" in capsys.readouterr().err


def _blocks_per_session(spec: SessionSpec) -> int:
    """A session's blocks at its end, by the fixture's own tokenizer (filler lines are 8 words)."""
    texts, script = Texts(spec.name, 8), session_script(spec, 0)
    talk, last = start_conversation(spec, script, texts, 8192, "n"), 0
    for turn in script.turns:
        prompt = turn_prompt(talk, texts, turn)
        last = len(render(prompt.messages)) + turn.output_tokens
        talk.answered(" ".join(["tok"] * turn.output_tokens), [], None, turn.output_tokens)
    return last // BLOCK


HOLDS = 3
SEARCH_SPEC = _spec(turn_tokens=16, output_tokens=8, tool_share=0.0, think_time_s=0.1)
CAPACITY = HOLDS * _blocks_per_session(SEARCH_SPEC) + 4
# A hit costs ~2 + 1 x ~24 uncached tokens = ~26 ms, a miss ~800 ms: the limit sits 370 ms from each, so a busy
# machine's lateness moves no turn across it.
SEARCH_SIM = ["--base-ms", 2, "--per-token-ms", 1.0, "--step-ms", 0.5, "--capacity-blocks", CAPACITY]
LIMIT = "ttft=400ms"


@pytest.mark.parametrize(
    "cache_sim", [SEARCH_SIM],
    indirect=True,
)  # fmt: skip
@pytest.mark.parametrize(("turns", "attainment"), [("all", 0.75), ("warm", 1.0)])
def test_the_capacity_search_finds_the_sessions_the_cache_holds(
    cache_sim: Target, tmp_path: Path, turns: str, attainment: float
) -> None:
    """Three sessions fit the cache: their later turns hit (about 26 ms), their first miss (about 800 ms, a quarter
    of the turns). With a fourth, the blocks of the session whose answer came first are the least recently used when
    the others' answers come in the think time after it: its next turn misses (LRU evicts a session's head first).
    Judged on every turn, the first turns' misses need an attainment of 75%; judged on warm turns only, every one of
    them must hit at the capacity and one miss past it fails the level."""
    slo = replace(parse_slo(LIMIT, attainment=attainment), turns=turns)
    with RunStore(tmp_path / "s.sqlite") as db:
        result, found = search_slo(db, [cache_sim], of_spec(SEARCH_SPEC), Load(warmup=0), slo, limit=8, over="sessions")
    assert found["sim"].best == HOLDS
    tried = {level: ok for level, _, ok in found["sim"].tried}
    assert tried[HOLDS] and not tried[HOLDS + 1]
    assert result.stored.slo["sim"].over == "sessions"
    thrashed = next(s.sessions for s in result.stored.steps if s.labels.level == HOLDS + 1)
    held = next(s.sessions for s in result.stored.steps if s.labels.level == HOLDS)
    assert thrashed is not None and held is not None and thrashed.hit_share is not None
    assert held.hit_share is not None and thrashed.hit_share < held.hit_share
    later = {name: [t.hit_share or 0.0 for t in got.per_turn if t.turn > 1] for name, got in
             (("held", held), ("thrashed", thrashed))}  # fmt: skip
    assert min(later["held"]) > 0.9 > min(later["thrashed"])
    from servelab.report.bench_view import held_and_broke

    said = held_and_broke("sim", result.stored.slo["sim"], result.stored.steps)
    assert said is not None and f"{HOLDS} sessions hold: later turns' TTFT p50" in said, said
    assert f"{HOLDS + 1} sessions miss" in said and said.count("hit share") == 2 and "preemptions 0" in said


@pytest.mark.parametrize("cache_sim", [[*SIM, "--context", 2048]], indirect=True)
def test_the_command_line_runs_a_preset_fitted_to_a_short_context(
    cache_sim: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--target", f"sim={cache_sim.url}", "--scenario", "agentic-coding", "--sessions", "2",
            "--turns", "6", "--think-time", "0", "--store", str(tmp_path / "s.sqlite"), "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("scaled by" in w and "sim's 2,048" in w for w in out["warnings"])
    figures = out["steps"][0]["sessions"]
    assert figures["turns"] == 12 and figures["ok"] == 12
    with RunStore(tmp_path / "s.sqlite") as db:
        records = export_run(db, out["run_id"])["records"]
    sent = [r for r in records if r["labels"].get("turn")]
    assert len(sent) == 12 and all(r["prompt_tokens"] + r["completion_tokens"] + CHAT_MARGIN <= 2048 for r in sent)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--scenario", "code-chat", "--sessions", "2"], "need a session scenario"),
        (["--scenario", "code-chat", "--slo", "ttft=1s", "--slo-over", "sessions"], "session scenarios only"),
        (["--scenario", "code-chat", "--slo", "ttft=1s", "--slo-turns", "warm"], "session scenarios only"),
        (["--scenario", "agentic-coding", "--slo", "ttft=1s", "--slo-turns", "cold"], "--slo-turns is all or warm"),
        (["--scenario", "agentic-coding", "--think-time", "soon"], "--think-time wants"),
    ],
)
def test_bad_session_options_are_said_before_any_server_is_asked(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--target", "x=http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


@pytest.mark.parametrize(
    "cache_sim",
    [SEARCH_SIM],
    indirect=True,
)
def test_a_sweep_point_holds_the_sessions_the_cache_holds(cache_sim: Target, tmp_path: Path) -> None:
    """A sweep's measurement of a session scenario (a spec file) at 1, 3 and 4 sessions, judged on warm turns: the
    point holds 3, and the fixture's capacity over the size the sessions reached says how many the cache holds."""
    from servelab.core.results.sweep import PointLogged, SweepPoint, SweepRun
    from servelab.sweep import Workload, sessions_held
    from servelab.sweep.measure import measure

    spec = tmp_path / "truth.toml"
    spec.write_text('name = "truth"\nsessions = 2\nturns = 4\nhead_tokens = 800\nturn_tokens = 16\n'
                    'output_tokens = 8\nthink_time_s = 0.1\nsummary_tokens = 100\n')  # fmt: skip
    slo = replace(parse_slo(LIMIT, attainment=1.0), turns="warm")
    with RunStore(tmp_path / "s.sqlite") as db:
        _, figures = measure(db, cache_sim, Workload((str(spec),), (1, HOLDS, HOLDS + 1), 1, None), slo)
    assert [(f.concurrency, f.sessions) for f in figures] == [(1, True), (HOLDS, True), (HOLDS + 1, True)]
    assert all(f.peak_tokens and f.peak_tokens // BLOCK <= CAPACITY for f in figures)
    point = SweepPoint(index=0, key="-", status="measured", logged=PointLogged(kv_tokens=CAPACITY * BLOCK),
                       figures=figures)  # fmt: skip
    (held,) = sessions_held(SweepRun(points=[point], slo={"ttft_ms": 400.0, "attainment": 1.0}))
    assert held.held == HOLDS and held.tried == [(1, True), (HOLDS, True), (HOLDS + 1, False)]
    assert held.logged_sessions is not None and HOLDS <= held.logged_sessions < HOLDS + 1


@pytest.mark.parametrize("cache_sim", [SIM], indirect=True)
def test_sessions_split_over_load_processes_keep_each_history_whole(cache_sim: Target, tmp_path: Path) -> None:
    """Four sessions from two load processes: each process drives every other session whole (a session never
    changes process, so its history and the replies it streamed stay its own), every later turn finds its history
    in the cache as in one process, and the step names both processes' load."""
    spec = _spec(sessions=4, turns=3)
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_bench(db, [cache_sim], [of_spec(spec)], Load(warmup=1, workers=2))
    turns = sorted(result.records, key=lambda r: (r.labels.session, r.labels.turn))
    assert [(r.labels.session, r.labels.turn) for r in turns] == [(s, t) for s in range(4) for t in (1, 2, 3)]
    assert all(r.ok for r in turns)
    for before, now in itertools.pairwise(turns):
        if now.labels.session == before.labels.session:
            assert now.cached_tokens == _expected_cached(before, now)
    assert len(result.stored.steps[0].clients) == 2
    figures = result.stored.steps[0].sessions
    assert figures is not None and (figures.sessions, figures.turns, figures.ok) == (4, 12, 12)


@pytest.mark.parametrize("cache_sim", [SIM], indirect=True)
def test_a_sweep_point_runs_request_scenarios_at_its_concurrency_and_sessions_at_their_levels(
    cache_sim: Target, tmp_path: Path
) -> None:
    """--concurrency for the request scenarios, --sessions for the session ones, two bench runs (their output lengths
    differ: 64 tokens a request, the spec's own replies a turn)."""
    from servelab.sweep import Workload
    from servelab.sweep.measure import measure

    spec = tmp_path / "truth.toml"
    spec.write_text('name = "truth"\nturns = 2\nhead_tokens = 200\nturn_tokens = 16\noutput_tokens = 5\n')
    with RunStore(tmp_path / "s.sqlite") as db:
        runs, figures = measure(db, cache_sim, Workload(("synthetic:16:4", str(spec)), (2,), 2, None, (), (1, 3)), None)
        records = {r: db.records(r) for r in runs.split(",")}
    assert len(records) == 2
    assert [(f.scenario, f.sessions) for f in figures] == [
        ("synthetic:16:4@c2", False), ("truth@c1", True), ("truth@c3", True)]  # fmt: skip
    turns = [r for got in records.values() for r in got if r.labels.turn]
    assert turns and all(r.completion_tokens == 5 for r in turns if r.ok)  # the spec's replies, not 64


@pytest.mark.parametrize(
    ("cache_sim", "said"),
    [([*SIM[:-1], 100_000], False), ([*SIM[:-1], 8], True)],  # a cache of 100,000 blocks; of 8 (128 tokens)
    indirect=["cache_sim"],
)
def test_later_turns_that_find_nothing_cached_are_said(cache_sim: Target, said: bool, tmp_path: Path) -> None:
    """A cache smaller than one session's history (as an engine with prefix caching off: vLLM's default for
    hybrid models) caches nothing a later turn can use: the step says so, and not when the cache holds it."""
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_bench(db, [cache_sim], [of_spec(_spec(sessions=1, turns=3))], Load(warmup=0))
    later = [r for r in result.records if (r.labels.turn or 0) > 1]
    assert len(later) == 2 and all(r.ok for r in later)
    assert all(r.cached_tokens == 0 for r in later) is said
    warned = [w for w in result.warnings if "later turn(s) found its history cached" in w]
    assert bool(warned) is said and (not said or "--enable-prefix-caching" in warned[0])
