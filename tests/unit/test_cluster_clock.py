"""The clock mapping of `bench --ray` (servelab.load.cluster.clock) and how a step is split over actors, on generated
inputs: whatever the host's true offset and wherever in the round trip it read its clock, the offset found is within
its bound; a mapped record keeps every interval inside it; the actors' request indices cover the run once."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from servelab.core.records import RequestRecord
from servelab.load import Load
from servelab.load.cluster import ClockMap, Exchange, actor_count, best, mapped, unaligned
from servelab.load.cluster.actor import interleaved, share_of
from servelab.load.scenarios import load_scenario
from servelab.load.workers import STREAMS_PER_WORKER

NS = st.integers(min_value=0, max_value=10**15)
OFFSET = st.integers(min_value=-(10**13), max_value=10**13)  # hours either way


@st.composite
def exchange(draw: st.DrawFn, offset: int) -> Exchange:
    """A round trip on the coordinator's clock, the host reading its own clock (true offset ``offset``) somewhere
    inside it."""
    t0 = draw(NS)
    t3 = t0 + draw(st.integers(min_value=0, max_value=10**9))
    at = draw(st.integers(min_value=t0, max_value=t3))
    return Exchange(t0, at + offset, t3)


@given(st.data(), OFFSET)
def test_the_offset_found_is_within_its_bound_of_the_truth(data: st.DataObject, offset: int) -> None:
    burst = data.draw(st.lists(exchange(offset), min_size=1, max_size=8))
    kept = best(burst)
    assert kept.t3 - kept.t0 == min(e.t3 - e.t0 for e in burst)
    for e in burst:
        assert abs(e.offset_ns - offset) <= e.bound_ns


@given(st.data(), OFFSET, st.integers(min_value=0, max_value=10**8))
def test_a_drifting_host_widens_the_bound_to_cover_it(data: st.DataObject, offset: int, drift: int) -> None:
    """Later bursts of a host whose offset moved by ``drift``: every one of them still lies within the map's bound of
    the start's offset, so a reading mapped with the start's offset at any time of the run is within the bound."""
    start = data.draw(exchange(offset))
    later = data.draw(st.lists(exchange(offset + drift), max_size=4))
    clock = ClockMap(start, later)
    for true in [offset, *([offset + drift] if later else [])]:
        assert abs(clock.offset_ns - true) <= clock.bound_ns
    assert clock.drift_ns <= drift + start.bound_ns + max([0, *(e.bound_ns for e in later)])  # seen through both
    assert clock.to_dict()["bursts"] == 1 + len(later)


@given(OFFSET, NS, st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=20))
def test_a_mapped_record_keeps_its_intervals_and_moves_every_stamp(offset: int, sent: int, gaps: list[int]) -> None:
    chunks = list(itertools.accumulate(gaps, initial=sent + 5))[1:]
    record = RequestRecord("r", "chat", scheduled_ns=sent - 3, sent_ns=sent, headers_ns=sent + 1,
                           first_byte_ns=sent + 2, first_token_ns=chunks[0], first_content_ns=chunks[0],
                           end_ns=chunks[-1] + 1, chunk_ns=chunks)  # fmt: skip
    clock = ClockMap(Exchange(0, offset, 0))  # an exact exchange: the offset itself
    moved = mapped(record, clock)
    assert moved.sent_ns == sent - offset and moved.scheduled_ns == sent - 3 - offset
    assert [b - a for a, b in itertools.pairwise(moved.chunk_ns)] == gaps[1:]
    assert moved.first_token_ns is not None and moved.first_token_ns - moved.sent_ns == chunks[0] - sent
    assert clock.to_coordinator(clock.to_host(sent)) == sent


def test_a_round_trip_that_ends_before_it_starts_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="cannot end before"):
        Exchange(10, 5, 9)
    with pytest.raises(ValueError, match="no exchange"):
        best([])


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=0, max_value=10**12))
def test_figures_needing_finer_alignment_than_the_bound_are_named(bound: int, window: int) -> None:
    said = unaligned(bound, window, 0.5)
    assert any(s.startswith("aggregate rates") for s in said) == (window > 0 and 2 * bound > 0.01 * window)
    assert any(s.startswith("in flight at each engine scrape") for s in said) == (bound > 0.05 * 1e9)


@given(st.integers(min_value=1, max_value=64), st.one_of(st.none(), st.integers(min_value=0, max_value=500)))
def test_the_actors_take_every_request_index_once(actors: int, requests: int | None) -> None:
    taken: list[int] = []
    for k in range(actors):
        take = interleaved(k, actors, requests)
        mine = list(itertools.islice(iter(take, None), 1000))
        assert requests is None or len(mine) == share_of(k, actors, requests)
        taken += mine
    if requests is not None:
        assert sorted(taken) == list(range(requests))
    else:
        assert len(set(taken)) == len(taken)


@given(
    st.integers(min_value=1, max_value=300),
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=1, max_value=64),
    st.one_of(st.none(), st.integers(min_value=1, max_value=64)),
    st.one_of(st.none(), st.integers(min_value=1, max_value=1000)),
)
def test_actors_are_one_per_node_or_per_32_streams_within_the_cluster(
    concurrency: int, nodes: int, cpus: int, workers: int | None, requests: int | None
) -> None:
    scenario = replace(load_scenario("code-chat"), concurrency=concurrency)
    count = actor_count(Load(requests=requests, workers=workers), scenario, nodes, cpus)
    assert 1 <= count <= max(1, min(cpus, concurrency, requests or concurrency))
    wanted = workers or max(nodes, -(-concurrency // STREAMS_PER_WORKER))
    assert count == max(1, min(wanted, cpus, concurrency, requests or concurrency))
