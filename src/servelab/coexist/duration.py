"""How long a coexist run will take, said before it starts, and how many utterances answer its question.

A probe segment is the LLM load's settle time and the utterances one after another (each its audio and a pause,
or the probe's period); an LLM-only baseline runs as long as the median probe segment and its settle time; every
condition runs once per round. The p99 of a condition's chunk intervals wants ``min_chunks`` chunks over the rounds,
and more utterances than that only lengthen the run: the default is the fewest that reach them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servelab.coexist.probes import Probe, WorkerProbe

UNKNOWN_UTTERANCE_S = 5.0  # an HTTP voice's utterance, when nothing says how long it speaks
DEFAULT_UTTERANCES = 10  # per condition and round, for a probe whose chunks per utterance are not known


def utterance_s(probe: Probe) -> float:
    """Seconds one utterance of the probe takes: its audio and pause (a frame probe: a second of frames), or its
    period; an HTTP voice: its period, else a guess."""
    if isinstance(probe, WorkerProbe):
        spec = probe.spec
        if spec.period_ms:
            return spec.period_ms / 1000
        audio = spec.chunks * spec.chunk_ms / 1000 if spec.mode == "voice" else 1.0
        return audio + spec.pause_ms / 1000
    period = getattr(probe, "period_s", 0.0)
    return period if period else UNKNOWN_UTTERANCE_S


def chunks_per_utterance(probe: Probe) -> int | None:
    """Chunks one utterance brings (frames: a second's worth), where the probe says."""
    if isinstance(probe, WorkerProbe):
        return probe.spec.chunks if probe.spec.mode == "voice" else probe.spec.fps
    return None


def default_utterances(probe: Probe, repeats: int, min_chunks: int) -> int:
    """The fewest utterances per condition and round that bring ``min_chunks`` chunks over ``repeats`` rounds."""
    per = chunks_per_utterance(probe)
    if not per:
        return DEFAULT_UTTERANCES
    return max(1, math.ceil(min_chunks / (per * max(1, repeats))))


def expected_s(
    probes: Sequence[Probe], segments: int, llm_segments: int, baselines: int, repeats: int, utterances: int,
    settle_s: float,
) -> float:  # fmt: skip
    """Seconds the run should take: per round, every probe segment (the slowest probe sets its length; the settle
    time where it has LLM load) and every LLM-only baseline (a segment's length and its settle time)."""
    segment = utterances * max((utterance_s(p) for p in probes), default=UNKNOWN_UTTERANCE_S)
    per_round = segments * segment + llm_segments * settle_s + baselines * (segment + settle_s)
    return repeats * per_round


def duration_text(seconds: float) -> str:
    """``about 4 minutes`` / ``about 40 seconds``."""
    if seconds < 90:
        return f"about {max(5, round(seconds / 5) * 5):.0f} seconds"
    return f"about {round(seconds / 60):.0f} minutes"
