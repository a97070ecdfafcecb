"""A verdict tested by relieving the side it names (``bench --confirm``): a step whose verdict is the load generator
runs again with twice the load processes, and what that changed decides.

The evidence alone cannot always tell a saturated client from a server at its limit beside it: on the H200, one load
process at 84-98% of a core against four API servers, the engine holding 86-95% of the requests' time, met a gain
of 16-31% from four processes on one day and -21% to +1% on another. Relieving the client answers it for the run at
hand: the rate rose by CONFIRMED_GAIN or more (the client was the limit), or it did not (the server side was, and
the verdict names which from the same evidence). The second run's records only give its rate: they are not stored
and no figure of the step comes from them.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.evidence import client_tok_s
from servelab.bench.verdict import CLIENT_HINT, client_note, judge_server_side
from servelab.core.records import RequestRecord
from servelab.core.results import Bottleneck, Relieved

CONFIRMED_GAIN = 0.10  # the rate rose this much with the client relieved: the client was the limit


def relieved(
    before: Sequence[RequestRecord], after: Sequence[RequestRecord], workers: int, more: int
) -> Relieved | None:
    """What ``more`` load processes instead of ``workers`` changed, from each run's own records (None when either
    run has no rate: nothing finished)."""
    rate_before, rate_after = client_tok_s(before), client_tok_s(after)
    if not rate_before or rate_after is None:
        return None
    return Relieved(
        side="client",
        what=f"{more} load processes instead of {workers}",
        tok_s_before=round(rate_before, 1),
        tok_s_after=round(rate_after, 1),
        change=round(rate_after / rate_before - 1, 4),
    )


def with_relief(verdict: Bottleneck, relief: Relieved, open_loop: bool) -> Bottleneck:
    """The verdict once the client was relieved: kept and said confirmed when the rate rose by CONFIRMED_GAIN or
    more, else the server side from the same evidence, the client among those near their limits where it was."""
    said = f"{relief.what} changed the rate {relief.change:+.0%} ({relief.tok_s_before:,.0f} -> "
    said += f"{relief.tok_s_after:,.0f} tok/s)"
    if relief.change >= CONFIRMED_GAIN:
        update = {"reason": f"{verdict.reason}; confirmed: {said}", "relieved": relief, "hint": CLIENT_HINT}
        return verdict.model_copy(update=update)
    server = judge_server_side(verdict.evidence, client_note(verdict.evidence, open_loop))
    return server.model_copy(update={"reason": f"not the load generator: {said}; {server.reason}", "relieved": relief})


def more_workers(workers: int, cores: int) -> int | None:
    """Twice the load processes, or as many as the cores allow beyond ``workers``; None when there is no core for
    even one more."""
    more = min(2 * workers, cores)
    return more if more > workers else None
