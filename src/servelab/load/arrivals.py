"""When requests are due, as objects bench and coexist share: a closed loop (N streams, each sending its next as
its last ends), an open loop (a constant or Poisson rate, due times fixed in advance so a late request is
measured from when it was due), cold-then-warm pairs, and how many: a count, or until cancelled."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servelab.load.runner import Load
    from servelab.load.scenarios import Scenario


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    concurrency: int


@dataclass(frozen=True, slots=True)
class OpenLoop:
    rate: float  # arrivals per second
    poisson: bool = True  # False: evenly spaced
    seed: int = 0

    def offsets(self) -> Iterator[float]:
        """Seconds after the start at which each arrival is due: 0, then exponential gaps (Poisson) or 1/rate."""
        rng, at = random.Random(self.seed), 0.0
        while True:
            yield at
            at += rng.expovariate(self.rate) if self.poisson else 1.0 / self.rate


@dataclass(frozen=True, slots=True)
class ColdThenWarm:
    """Each prompt twice in a row: cold, then warm (the second should find the first in the prefix cache)."""


Arrivals = ClosedLoop | OpenLoop | ColdThenWarm


def arrivals_for(load: Load, scenario: Scenario) -> Arrivals:
    """The pattern a load asks of a scenario: cold-then-warm when the scenario is about the cache, an open loop when
    either sets a rate, else a closed loop at the load's concurrency (or the scenario's)."""
    if scenario.cache == "cold-then-warm":
        return ColdThenWarm()
    rate = scenario.rate or load.rate
    if rate:
        return OpenLoop(float(rate), poisson=load.arrival == "poisson", seed=load.seed)
    return ClosedLoop(load.concurrency or scenario.concurrency)


def indices(requests: int | None) -> Iterable[int]:
    """0, 1, ... ``requests`` of them, or without end (until cancelled or the run's duration) for None."""
    return itertools.count() if requests is None else range(requests)
