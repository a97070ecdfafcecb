"""Arrival patterns as objects: the pattern a load asks of a scenario, open-loop due times (Poisson with the
requested mean gap, evenly spaced, reproducible from the seed), counts or without end."""

from __future__ import annotations

import itertools
import statistics

from servelab.load import Load, load_scenario
from servelab.load.arrivals import ClosedLoop, ColdThenWarm, OpenLoop, arrivals_for, indices


def test_the_pattern_a_load_asks_of_a_scenario() -> None:
    chat = load_scenario("code-chat")
    assert arrivals_for(Load(concurrency=3), chat) == ClosedLoop(3)
    assert arrivals_for(Load(rate=2.5, arrival="constant", seed=4), chat) == OpenLoop(2.5, poisson=False, seed=4)
    assert arrivals_for(Load(rate=2.5), chat) == OpenLoop(2.5, poisson=True, seed=0)
    assert arrivals_for(Load(rate=9), load_scenario("prefix-long")) == ColdThenWarm()  # the cache pairs win
    assert arrivals_for(Load(), load_scenario("concurrent-4")) == ClosedLoop(4)  # the scenario's own level


def test_open_loop_due_times() -> None:
    even = list(itertools.islice(OpenLoop(4.0, poisson=False).offsets(), 5))
    assert even == [0.0, 0.25, 0.5, 0.75, 1.0]
    poisson = list(itertools.islice(OpenLoop(10.0, seed=7).offsets(), 20001))
    gaps = [b - a for a, b in itertools.pairwise(poisson)]
    assert poisson[0] == 0.0 and all(g > 0 for g in gaps)
    assert abs(statistics.fmean(gaps) - 0.1) < 0.005 and abs(statistics.stdev(gaps) - 0.1) < 0.01  # exponential
    assert list(itertools.islice(OpenLoop(10.0, seed=7).offsets(), 50)) == poisson[:50]  # the seed fixes them


def test_a_count_or_without_end() -> None:
    assert list(indices(3)) == [0, 1, 2]
    assert list(itertools.islice(indices(None), 100_000))[-1] == 99_999  # until cancelled: no end
