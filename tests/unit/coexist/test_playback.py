"""The playback model on known arrival sequences: exact underruns, stall times and start times."""

import pytest

from servelab.coexist.playback import Chunk, Utterance, play
from servelab.coexist.summary import figures


def utt(arrivals: list[float], audio: float = 0.1, scheduled: float = 0.0) -> Utterance:
    return Utterance(scheduled, tuple(Chunk(t, audio) for t in arrivals))


def test_on_time_chunks_never_underrun() -> None:
    p = play(utt([0.05, 0.10, 0.15, 0.20]), lookahead_s=0.0)
    assert p.underruns == 0 and p.stall_s == 0.0
    assert p.ttfa_s == pytest.approx(0.05) and p.start_s == pytest.approx(0.05)
    assert p.intervals_s == pytest.approx((0.05, 0.05, 0.05))
    assert p.rtf == pytest.approx(0.20 / 0.4)


def test_one_late_chunk_without_lookahead() -> None:
    # playback starts at 0.1; chunk 2 is needed at 0.3 and comes at 0.35: one underrun, 0.05 s of silence; after
    # it the clock is 0.45, so chunk 3 (0.40) is in time
    p = play(utt([0.1, 0.15, 0.35, 0.40]), lookahead_s=0.0)
    assert p.underruns == 1
    assert p.stall_s == pytest.approx(0.05)
    assert p.lags_s == pytest.approx((0.0, -0.05, 0.05, 0.0))


def test_lookahead_absorbs_the_same_late_chunk_at_a_cost() -> None:
    # with 0.2 s of lookahead, playback waits for two chunks (0.15), needs chunk 2 at 0.35: just in time
    p = play(utt([0.1, 0.15, 0.35, 0.40]), lookahead_s=0.2)
    assert p.underruns == 0 and p.stall_s == 0.0
    assert p.start_s == pytest.approx(0.15)
    # a later chunk still underruns, by the part the lookahead could not cover
    q = play(utt([0.1, 0.15, 0.50, 0.55]), lookahead_s=0.2)
    assert q.underruns == 1 and q.stall_s == pytest.approx(0.15)


def test_several_underruns_add_up() -> None:
    # 0.1 s chunks at 0, 0.3, 0.6: each after a 0.2 s gap in the audio
    p = play(utt([0.0, 0.3, 0.6], scheduled=-0.05), lookahead_s=0.0)
    assert p.underruns == 2 and p.stall_s == pytest.approx(0.4)
    assert p.ttfa_s == pytest.approx(0.05)


def test_short_utterance_starts_when_it_ends() -> None:
    p = play(utt([0.1, 0.2], audio=0.05), lookahead_s=0.3)
    assert p.start_s == pytest.approx(0.2) and p.underruns == 0


def test_empty_utterance() -> None:
    p = play(Utterance(0.0, ()), lookahead_s=0.3)
    assert p.ttfa_s is None and p.underruns == 0


def test_condition_figures_per_lookahead() -> None:
    late = utt([0.1, 0.15, 0.35, 0.40])
    good = utt([0.05, 0.10, 0.15, 0.20], scheduled=1.0)  # arrivals before its schedule are odd but harmless
    figs = figures("c", [late, utt([0.05, 0.10, 0.15, 0.20])], [0.0, 200.0])
    assert figs.utterances == 2 and figs.chunks == 8 and figs.errors == 0
    by = {lf.lookahead_ms: lf for lf in figs.listeners}
    assert by[0.0].underruns == 1 and by[0.0].utterances_with_underrun == 1
    assert by[0.0].stall_ms == pytest.approx(50.0)
    assert by[200.0].underruns == 0
    assert figs.interval_max_ms == pytest.approx(200.0)
    # pace: (0.30 + 0.15) s of intervals brought 0.6 s of audio
    assert figs.pace_rtf == pytest.approx(0.45 / 0.6)
    assert good.chunks[0].audio_s == 0.1


def test_large_chunks_stutter_after_the_first_one() -> None:
    """vLLM-Omni's Qwen3-TTS shape: an 80 ms first frame, then 2 s chunks. Arrivals 0.1 (80 ms), 0.5, 2.4, 4.6
    (2 s each). No lookahead: dry at 0.18 until 0.5 (0.32 s), then the clock is 2.5, chunk 3 comes with 0.1 s left,
    the clock is 4.5, chunk 4 comes 0.1 s late. 300 ms: playback waits for 0.5 (2.08 s buffered), the clock reaches
    2.58 and 4.58; chunk 4 is 0.02 s late. 500 ms is the same start. The intervals (0.4, 1.9, 2.2 s) look like a
    steady slow stream; the listener hears gaps after the first chunk."""
    u = Utterance(0.0, (Chunk(0.1, 0.08), Chunk(0.5, 2.0), Chunk(2.4, 2.0), Chunk(4.6, 2.0)))
    none, short, long = (play(u, la) for la in (0.0, 0.3, 0.5))
    assert none.underruns == 2 and none.stall_s == pytest.approx(0.32 + 0.1)
    assert none.ahead_s == pytest.approx((0.0, 0.1, 0.0))
    assert short.underruns == 1 and short.stall_s == pytest.approx(0.02) and short.start_s == pytest.approx(0.5)
    assert short.ahead_s == pytest.approx((0.18, 0.0))
    assert long.underruns == 1 and long.start_s == pytest.approx(0.5)
    assert none.ttfa_s == pytest.approx(0.1) and none.intervals_s == pytest.approx((0.4, 1.9, 2.2))
    figs = figures("c", [u], [0.0, 300.0])
    assert [x.underruns for x in figs.listeners] == [2, 1]
    assert figs.listeners[0].ahead_min_ms == pytest.approx(0.0) and figs.listeners[1].ahead_min_ms == pytest.approx(0.0)


def test_lateness_counts_from_when_the_utterance_was_due() -> None:
    """Two utterances that keep the same pace once they speak; the second waited 1 s for its turn. From its own
    first chunk neither is late; from when it was due the second is late by the wait on every chunk."""
    on_time = utt([0.01, 0.05, 0.09, 0.13], audio=0.04)
    waited = utt([1.01, 1.05, 1.09, 1.13], audio=0.04)
    assert play(on_time, 0.0).late_s == pytest.approx((0.01, 0.01, 0.01, 0.01))
    assert play(waited, 0.0).late_s == pytest.approx((1.01, 1.01, 1.01, 1.01))
    assert play(waited, 0.0).lags_s == pytest.approx((0.0, 0.0, 0.0, 0.0))
    # a decoder slower than the audio falls further behind chunk by chunk
    assert play(utt([0.01, 0.06, 0.11], audio=0.04), 0.0).late_s == pytest.approx((0.01, 0.02, 0.03))
    assert figures("alone", [on_time], [0.0]).lateness_p99_ms == pytest.approx(10.0)
    assert figures("load", [on_time, waited], [0.0]).lateness_p99_ms == pytest.approx(1010.0)
