"""A session's think time is idle by design: the client's stream occupancy (what the bottleneck verdict reads to
call a client starved) counts only the time a stream sat idle past its turn's due time."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench.evidence import occupancy
from servelab.core.records import Labels, RequestRecord

MS = 1_000_000


def _session(index: int, turns: list[tuple[int, int, int]]) -> list[RequestRecord]:
    """(think ms, late ms, in flight ms) per turn: due a think after the last answer, sent late after that."""
    out, end = [], 0
    for n, (think, late, busy) in enumerate(turns, start=1):
        due = end + think * MS
        sent = due + late * MS
        end = sent + busy * MS
        out.append(RequestRecord(request_id=f"{index}-{n}", endpoint="chat", sent_ns=sent, first_token_ns=sent + MS,
                                 chunk_ns=[sent + MS, end], end_ns=end, completion_tokens=2, scheduled_ns=due,
                                 labels=Labels(step="s", session=index, turn=n)))  # fmt: skip
    return out


def test_streams_that_think_on_time_are_fully_occupied() -> None:
    """Each turn 100 ms in flight after 900 ms of think time: 10% raw occupancy, all of it by design."""
    records = [r for s in range(3) for r in _session(s, [(0, 0, 100)] + [(900, 0, 100)] * 5)]
    assert occupancy(records, 3) == 1.0


def test_a_stream_sent_late_past_its_due_time_counts_against_the_client() -> None:
    """The same sessions, each turn sent 300 ms after it was due: the streams were idle by the client's fault for
    300 of every 400 ms outside the think time."""
    records = [r for s in range(2) for r in _session(s, [(0, 0, 100)] + [(900, 300, 100)] * 5)]
    got = occupancy(records, 2)
    assert got is not None and 0.2 < got < 0.35


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 500), st.integers(1, 500)), min_size=2,
                         max_size=6), min_size=1, max_size=4))  # fmt: skip
def test_occupancy_is_a_share_and_never_below_the_raw_figure(sessions: list[list[tuple[int, int, int]]]) -> None:
    records = [r for i, turns in enumerate(sessions) for r in _session(i, turns)]
    got = occupancy(records, len(sessions))
    raw = occupancy([replace(r, labels=Labels(step="s")) for r in records], len(sessions))  # no think time known
    if got is None:
        return
    assert 0.0 <= got <= 1.0
    if raw is not None:
        assert got >= raw
