"""Greedy replies that cycle on one shared unit (random weights: every stream decodes the same token) are said;
real replies, sampled steps and cycles each stream has alone are not."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from servelab.core.records import ErrorClass, RequestRecord
from servelab.load.cycles import MAX_PERIOD, MIN_REPEATS, TAIL, cycle_unit, cycling_replies


def _replies(*texts: str) -> list[RequestRecord]:
    return [RequestRecord(request_id=f"r{i}", endpoint="chat", output_text=t) for i, t in enumerate(texts)]


DUMMY = "claimed begins" + " claimed begins" * 40  # SmolLM2's config with dummy weights, greedy (docs/sweep.md)
REAL = (
    "Here's a step-by-step guide to help you get started: first, list what the launch needs; then give each part "
    "an owner and a date, and check the plan with the team before the week ends."
)


def test_a_greedy_step_on_random_weights_is_said_and_names_the_cure() -> None:
    told = cycling_replies(_replies(DUMMY, DUMMY, DUMMY, REAL), temperature=0.0)
    assert told is not None and "3 of 4 replies" in told and "--temperature 1" in told
    assert "' claimed begins claimed begins'" in told  # as the replies end, not the rotated unit
    assert cycle_unit(DUMMY) == " begins claimed"  # "claimed begins " rotated to its smallest form


def test_real_replies_sampled_steps_and_private_cycles_are_not() -> None:
    assert cycling_replies(_replies(REAL, REAL[::-1], REAL.upper()), temperature=0.0) is None
    assert cycling_replies(_replies(DUMMY, DUMMY), temperature=1.0) is None  # sampled: never said
    assert cycling_replies(_replies("ab" * 40, "xyz" * 40, "pq" * 40), temperature=0.0) is None  # no shared unit
    assert cycling_replies(_replies(DUMMY, DUMMY, REAL, REAL), temperature=0.0) is None  # half is not most
    failed = _replies(DUMMY, DUMMY, REAL)
    for record in failed[:2]:
        record.error = ErrorClass.TIMEOUT  # a failed request's partial text says nothing
    assert cycling_replies(failed, temperature=0.0) is None
    assert cycling_replies([], temperature=0.0) is None


@given(st.text(min_size=1, max_size=MAX_PERIOD), st.integers(2 * MIN_REPEATS + 1, 60), st.text(max_size=40))
def test_a_repeated_unit_is_found_and_what_is_found_repeats(unit: str, times: int, head: str) -> None:
    assume(len(head) <= len(unit) * times)  # the second half lies inside the repeats
    text = head + unit * times
    found = cycle_unit(text)
    assert found is not None and len(found) <= len(unit)
    tail = text[max(len(text) // 2, len(text) - TAIL) :]
    period = len(found)
    assert tail[period:] == tail[:-period]  # the second half repeats it


@given(st.text(max_size=300))
def test_whatever_is_called_a_cycle_repeats_at_least_min_repeats_times(text: str) -> None:
    found = cycle_unit(text)
    if found is not None:
        tail = text[max(len(text) // 2, len(text) - TAIL) :]
        assert len(found) <= MAX_PERIOD and len(tail) >= MIN_REPEATS * len(found)
        assert tail[len(found) :] == tail[: -len(found)]
