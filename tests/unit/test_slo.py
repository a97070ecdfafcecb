import pytest

from servelab.bench.slo import SLO, parse_slo, search_max_level
from servelab.core.errors import UsageError
from servelab.core.records import ErrorClass, RequestRecord

MS = 1_000_000


def rec(ttft: float, gap: float, tokens: int = 11, error: ErrorClass | None = None) -> RequestRecord:
    chunks = [int(ttft * MS + i * gap * MS) for i in range(tokens)]
    return RequestRecord(
        request_id="r",
        endpoint="chat",
        sent_ns=0,
        first_token_ns=chunks[0],
        chunk_ns=chunks,
        end_ns=chunks[-1],
        completion_tokens=tokens,
        error=error,
    )


def test_parse() -> None:
    assert parse_slo("ttft=300ms,itl=50ms") == SLO(ttft_ms=300, itl_ms=50)
    assert parse_slo("e2e=2s", attainment=0.99) == SLO(e2e_ms=2000, attainment=0.99)
    for bad in ("ttft", "speed=3ms", "ttft=fast", ""):
        with pytest.raises(UsageError):
            parse_slo(bad)


def test_good_requests_and_errors_count_as_failures() -> None:
    slo = SLO(ttft_ms=300, tpot_ms=50, attainment=0.75)
    good, slow_first, slow_decode = rec(100, 20), rec(400, 20), rec(100, 60)
    failed = rec(100, 20, error=ErrorClass.HTTP_5XX)
    assert slo.good(good) and not slo.good(slow_first) and not slo.good(slow_decode) and not slo.good(failed)
    assert slo.attained([good, good, good, failed]) == 0.75 and slo.met([good, good, good, failed])
    assert not slo.met([])


def test_search_doubles_then_bisects_to_the_highest_passing_level() -> None:
    tried: list[int] = []

    def run_level(level: int) -> list[RequestRecord]:  # TTFT grows 40 ms per concurrent stream
        tried.append(level)
        return [rec(40 * level, 20)] * 4

    search = search_max_level(run_level, SLO(ttft_ms=300), limit=64)
    assert search.best == 7  # 7 * 40 = 280 <= 300 < 320
    assert tried == [1, 2, 4, 8, 6, 7]


def test_search_stops_at_the_limit_and_reports_none_when_even_one_fails() -> None:
    assert search_max_level(lambda n: [rec(10, 1)], SLO(ttft_ms=300), limit=5).best == 5
    assert search_max_level(lambda n: [rec(999, 1)], SLO(ttft_ms=300), limit=5).best is None


def test_sweep_levels_name_each_step() -> None:
    from servelab.bench import at_levels, expand

    names = [(s.name, s.concurrency) for s in at_levels(expand(["code-chat"]), [1, 4])]
    assert names == [("code-chat@c1", 1), ("code-chat@c4", 4)]


def test_rate_search_bisects_to_the_requested_precision() -> None:
    from servelab.bench.slo import search_max_rate

    tried: list[float] = []

    def run_rate(rate: float) -> list[RequestRecord]:  # TTFT grows 90 ms per request/s offered
        tried.append(rate)
        return [rec(90 * rate, 20)] * 4

    search = search_max_rate(run_rate, SLO(ttft_ms=300), start=1.0, limit=100.0, precision=0.1)
    assert search.over == "rate"
    assert tried[:3] == [1.0, 2.0, 4.0]  # doubles until 4 req/s fails (360 ms)
    assert search.best is not None and 3.0 <= search.best <= 300 / 90
    failed_above = min(r for r in tried if 90 * r > 300)
    assert failed_above - search.best <= 0.1 * failed_above


def test_rate_search_tries_the_limit_itself_and_stops_when_the_start_fails() -> None:
    from servelab.bench.slo import search_max_rate

    assert search_max_rate(lambda r: [rec(10, 1)], SLO(ttft_ms=300), start=1.0, limit=10.0).best == 10.0
    tried: list[float] = []
    none = search_max_rate(lambda r: tried.append(r) or [rec(999, 1)], SLO(ttft_ms=300), start=1.0, limit=10.0)
    assert none.best is None and tried == [1.0]


def test_warm_turns_leave_out_each_sessions_first_turn_only() -> None:
    """The first turn of a session is judged by "all", left out by "warm"; records with no turn (a plain step) are
    judged either way, so "warm" never empties a step that has records."""
    from dataclasses import replace

    from servelab.core.records import Labels

    def turn(n: int | None, ttft: float) -> RequestRecord:
        return replace(rec(ttft, 20), labels=Labels(step="s", session=0, turn=n))

    cold, warm = turn(1, 5000), turn(2, 100)
    every, later = SLO(ttft_ms=300, attainment=1.0), SLO(ttft_ms=300, attainment=1.0, turns="warm")
    assert not every.met([cold, warm]) and later.met([cold, warm])
    assert later.attained([cold, warm, turn(3, 400)]) == 0.5
    assert later.judged([turn(None, 5000)]) and not later.met([turn(None, 5000)])
    assert not later.met([cold])  # only first turns: nothing judged, never met


def test_a_search_cut_short_has_told_every_level_it_judged() -> None:
    """The search reports itself after each level, so a run stopped mid-level (a SIGTERM at the device's time
    limit) keeps the levels already judged; the stored search says it was cut short."""
    from servelab.core.results.bench import SloSearch
    from servelab.report.bench_view import slo_verdict

    seen: list[list[tuple[float, float, bool]]] = []

    def run_level(level: int) -> list[RequestRecord]:
        if level == 4:
            raise KeyboardInterrupt
        return [rec(40 * level, 20)] * 4

    with pytest.raises(KeyboardInterrupt):
        search_max_level(run_level, SLO(ttft_ms=300), limit=64, on_attempt=lambda s: seen.append(list(s.tried)))
    assert seen == [[(1, 1.0, True)], [(1, 1.0, True), (2, 1.0, True)]]
    cut = SloSearch(best=2, tried=seen[-1], slo={"ttft_ms": 300}, done=False)
    assert "cut short" in slo_verdict("t", cut) and "cut short" not in slo_verdict(
        "t", cut.model_copy(update={"done": True})
    )
