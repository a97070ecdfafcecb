"""Per-condition figures from utterances: time to first audio, chunk-interval quantiles (p99 with its interval and
sample count), real-time factor, and what a listener with each lookahead hears (underruns, stall time); frames get
latency and the lowest frame rate."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from servelab.coexist.playback import Utterance, play
from servelab.core.figures import Figure
from servelab.core.results import ConditionFigures, ListenerFigures
from servelab.core.stats import quantile_interval

MS = 1000.0


def _ms(value: float | None) -> float | None:
    return None if value is None else value * MS


def _q(values: Sequence[float], q: float) -> float | None:
    return quantile_interval(values, q).value


def figures(condition: str, utterances: Sequence[Utterance], lookaheads_ms: Sequence[float]) -> ConditionFigures:
    ok = [u for u in utterances if u.error is None and u.chunks]
    plays = [play(u, 0.0) for u in ok]
    intervals = [i for p in plays for i in p.intervals_s]
    p99 = quantile_interval(intervals, 0.99)
    ttfas = [p.ttfa_s for p in plays if p.ttfa_s is not None]
    rtfs = [p.rtf for p in plays if p.rtf is not None]
    lates = [late for p in plays for late in p.late_s]
    out = ConditionFigures(
        condition=condition,
        utterances=len(utterances),
        chunks=sum(len(u.chunks) for u in ok),
        errors=len(utterances) - len(ok),
        ttfa_p50_ms=_ms(_q(ttfas, 0.5)),
        ttfa_p95_ms=_ms(_q(ttfas, 0.95)),
        interval_p50_ms=_ms(_q(intervals, 0.5)),
        interval_p95_ms=_ms(_q(intervals, 0.95)),
        interval_p99_ms=_ms(p99.value),
        interval_p99_low_ms=_ms(p99.low),
        interval_p99_high_ms=_ms(p99.high),
        interval_max_ms=_ms(max(intervals)) if intervals else None,
        lag_p99_ms=_ms(_q([lag for p in plays for lag in p.lags_s[1:]], 0.99)),
        lateness_p99_ms=_ms(_q(lates, 0.99)),
        rtf_mean=statistics.fmean(rtfs) if rtfs else None,
        rtf_p95=_q(rtfs, 0.95),
        pace_rtf=_pace(ok),
        listeners=[] if _is_frames(ok) else [_listener(ok, la) for la in lookaheads_ms],
        samples={"interval": len(intervals), "lateness": len(lates), "ttfa": len(ttfas)},
        maxima={name: max(v) * MS for name, v in (("interval", intervals), ("lateness", lates), ("ttfa", ttfas)) if v},
    )
    _frames(out, ok)
    return out


def _is_frames(utterances: Sequence[Utterance]) -> bool:
    """Frames carry their due times; a jitter-buffer listener is a voice's, not theirs."""
    return any(c.due_s is not None for u in utterances for c in u.chunks)


def _pace(utterances: Sequence[Utterance]) -> float | None:
    gaps = sum(u.chunks[-1].arrived_s - u.chunks[0].arrived_s for u in utterances if len(u.chunks) > 1)
    audio = sum(c.audio_s for u in utterances for c in u.chunks[1:])
    return gaps / audio if audio > 0 else None


def _listener(utterances: Sequence[Utterance], lookahead_ms: float) -> ListenerFigures:
    plays = [play(u, lookahead_ms / MS) for u in utterances]
    audio_min = sum(p.audio_s for p in plays) / 60 or 1.0
    stall = sum(p.stall_s for p in plays)
    starts = [p.start_s for p in plays if p.start_s is not None]
    ahead = [a for p in plays for a in p.ahead_s]
    return ListenerFigures(
        lookahead_ms=lookahead_ms,
        underruns=sum(p.underruns for p in plays),
        utterances_with_underrun=sum(p.underruns > 0 for p in plays),
        stall_ms=stall * MS,
        stall_ms_per_min=stall * MS / audio_min,
        start_p50_ms=_ms(_q(starts, 0.5)),
        ahead_min_ms=_ms(min(ahead)) if ahead else None,
        ahead_p5_ms=_ms(_q(ahead, 0.05)),
    )


def _frames(out: ConditionFigures, utterances: Sequence[Utterance]) -> None:
    """Frames carry when they were due: latency per frame, and the frame rate of each one-second window (frames
    after the first over the time from the first to the last)."""
    latencies = [c.arrived_s - c.due_s for u in utterances for c in u.chunks if c.due_s is not None]
    if not latencies:
        return
    out.frame_latency_p99_ms = _ms(_q(latencies, 0.99))
    spans = [
        (len(u.chunks) - 1, u.chunks[-1].arrived_s - u.chunks[0].arrived_s) for u in utterances if len(u.chunks) > 1
    ]
    rates = [n / span for n, span in spans if span > 0]
    out.min_fps = min(rates) if rates else None


def condition_figure(c: ConditionFigures, name: str, q: float) -> Figure:
    """A condition's stored percentile (``"interval"``, 0.99 -> ``interval_p99_ms``) with the samples it rests on
    (core.figures prints it as one only where they support it; the chunk interval's largest is kept beside it). A run
    stored before the counts: an utterance's intervals are its chunks less one."""
    value = getattr(c, f"{name}_p{q * 100:g}_ms")
    n = c.samples.get(name, max(0, c.chunks - (c.utterances - c.errors)) if name == "interval" else None)
    return Figure(q, value, n, c.maxima.get(name, c.interval_max_ms if name == "interval" else None))
