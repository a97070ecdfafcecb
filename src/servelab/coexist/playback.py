"""The listener's side of a streamed voice: a jitter buffer that waits for ``lookahead`` seconds of audio before it
starts playing, then plays without pause; a chunk that arrives after the buffer ran dry is an underrun, and the
silence until it arrives is stall time; the audio still buffered ahead of the playhead when each chunk arrives says
how close the listener came to silence, whatever the chunking (a server sending 2 s chunks after an 80 ms first one
stutters after the first chunk though its chunk interval looks steady). Pure functions over arrival times, so a
known arrival sequence gives exact underrun counts and stall times."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Chunk:
    arrived_s: float  # when the chunk's last byte arrived, on the run's clock
    audio_s: float  # how much audio it carries (a frame: its share of a second)
    due_s: float | None = None  # frames: when the frame was due (its latency is arrival minus this)


@dataclass(frozen=True, slots=True)
class Utterance:
    scheduled_s: float  # when the utterance was asked for (open-loop schedule)
    chunks: tuple[Chunk, ...]
    condition: str = ""
    error: str | None = None
    probe: str = ""  # which probe (several run at once), by its name


@dataclass(frozen=True, slots=True)
class Playback:
    ttfa_s: float | None  # scheduled -> first audio arrived
    start_s: float | None  # scheduled -> playback started (the lookahead filled, or the stream ended)
    intervals_s: tuple[float, ...]  # between consecutive chunk arrivals
    lags_s: tuple[float, ...]  # per chunk: arrival minus the moment an unbroken playback would need it
    underruns: int
    stall_s: float
    audio_s: float
    rtf: float | None  # generation time over audio duration: below 1 keeps up on average
    ahead_s: tuple[float, ...] = ()  # per chunk after playback started: audio left to play when it arrived (0: dry)
    late_s: tuple[float, ...] = ()  # per chunk: arrival minus when an unbroken playback from the due time needs it


def play(utterance: Utterance, lookahead_s: float) -> Playback:
    """Replay one utterance's arrivals through a jitter buffer of ``lookahead_s`` seconds."""
    chunks = sorted(utterance.chunks, key=lambda c: c.arrived_s)
    if not chunks:
        return Playback(None, None, (), (), 0, 0.0, 0.0, None)
    t0 = utterance.scheduled_s
    audio = sum(c.audio_s for c in chunks)
    start = _start_time(chunks, lookahead_s)
    clock, underruns, stall, ahead = start, 0, 0.0, []
    for chunk in chunks:
        if chunk.arrived_s > start:  # playing: how much audio the listener still had when this chunk came
            ahead.append(max(0.0, clock - chunk.arrived_s))
        if chunk.arrived_s > clock:  # the buffer ran dry before this chunk came
            underruns += 1
            stall += chunk.arrived_s - clock
            clock = chunk.arrived_s
        clock += chunk.audio_s
    intervals = tuple(b.arrived_s - a.arrived_s for a, b in itertools.pairwise(chunks))
    rtf = (chunks[-1].arrived_s - t0) / audio if audio > 0 else None
    return Playback(
        chunks[0].arrived_s - t0,
        start - t0,
        intervals,
        _late(chunks, start),
        underruns,
        stall,
        audio,
        rtf,
        tuple(ahead),
        _late(chunks, t0),
    )


def _late(chunks: Sequence[Chunk], due: float) -> tuple[float, ...]:
    """How late each chunk came for a listener who wanted the utterance unbroken from ``due``: from the moment it
    was due, the first chunk's is the time to first audio, a later one's grows with a slow decoder and with waiting
    for a turn; from when playback started, the lags a jitter buffer sees."""
    out, needed = [], due
    for chunk in chunks:
        out.append(chunk.arrived_s - needed)
        needed += chunk.audio_s
    return tuple(out)


def _start_time(chunks: Sequence[Chunk], lookahead_s: float) -> float:
    """When the buffer first holds ``lookahead_s`` of audio; the last arrival if the utterance is shorter."""
    buffered = 0.0
    for chunk in chunks:
        buffered += chunk.audio_s
        if buffered >= lookahead_s - 1e-12:
            return chunk.arrived_s
    return chunks[-1].arrived_s
