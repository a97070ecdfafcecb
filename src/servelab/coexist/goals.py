"""What a condition must keep for the voice to be called safe, and the verdict of each condition against it.

Defaults: the voice's p99 chunk lateness within +10% of the voice alone (and 5 ms of slack, so a few ms alone does
not make any jitter a failure), lateness counted from the moment the utterance was due (a voice that keeps its pace
once it speaks but starts a second late, waiting for the GPU or for its previous turn, is a second late); no
underrun for a listener with 300 ms of lookahead; an avatar at 25 fps or more; and the LLM keeping 80% of what it
did with no probe running (the lower of its output and prompt token rates' shares). (The frame rate is counted over
one-second windows, so within 2% of the goal meets it: one frame a few ms late reads 24.9 fps at 25.)
``--goals`` changes them: ``lateness=1.1,slack=5,underruns@300=0,fps=25,llm=0.8``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace

from servelab.coexist.summary import condition_figure
from servelab.core.errors import UsageError
from servelab.core.figures import share_text
from servelab.core.results import ConditionFigures, ListenerFigures, LlmFigures

EPS = 1e-6  # a figure computed to equal its goal meets it
FPS_TOLERANCE = 0.98  # a frame rate counted over one-second windows: one frame a few ms late reads 24.9 at 25 fps


@dataclass(frozen=True, slots=True)
class Goals:
    lateness: float = 1.10  # voice p99 lateness at most this times the voice alone's ...
    slack: float = 5.0  # ... plus this many ms
    lookahead: float = 300.0  # the listener whose underruns count (ms of lookahead)
    underruns: float = 0.0  # at most this many underruns for that listener
    fps: float = 25.0  # frame probes: the lowest frame rate at least this
    llm: float = 0.80  # the LLM's aggregate tok/s at least this share of its own with no probe

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def parse_goals(text: str) -> Goals:
    """``lateness=1.1,slack=5,underruns@300=0,fps=25,llm=0.8`` (any of them)."""
    goals, names = Goals(), {f.name for f in fields(Goals)}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key, _, at = key.partition("@")
        if not sep or key not in names:
            raise UsageError(f"cannot read goal {part!r}", hint="like lateness=1.1,underruns@300=0,fps=25,llm=0.8")
        try:
            number = float(value)
            goals = replace(goals, **{key: number}, **({"lookahead": float(at)} if at else {}))
        except ValueError:
            raise UsageError(f"goal {part!r}: {value!r} is not a number") from None
    return goals


def judge(
    conditions: Sequence[ConditionFigures], goals: Goals, alone: Mapping[str, ConditionFigures] | None = None
) -> None:
    """Set ``meets`` and ``verdict`` on every probe's figures beside some load, against each probe alone (the
    run's own "alone" unless ``alone`` gives another run's, by probe)."""
    if alone is None:
        alone = {c.probe: c for c in conditions if c.condition == "alone"}
    for c in conditions:
        if not c.probe or (c.condition == "alone" and alone.get(c.probe) is c) or c.utterances == 0:
            continue
        missed, held = _check(c, alone.get(c.probe), goals)
        c.meets = not missed
        c.verdict = _verdict(missed, held)


def _verdict(missed: list[str], held: list[str]) -> str:
    """Every goal judged, the missed first: a miss does not hide what held (the LLM's share beside a late voice)."""
    if not missed:
        return "meets the goals: " + "; ".join(held)
    return "misses: " + "; ".join(missed) + (f" (held: {'; '.join(held)})" if held else "")


def _check(c: ConditionFigures, alone: ConditionFigures | None, goals: Goals) -> tuple[list[str], list[str]]:
    missed: list[str] = []
    held: list[str] = []

    def note(ok: bool, text: str) -> None:
        (held if ok else missed).append(text)

    if c.min_fps is not None:
        note(c.min_fps >= goals.fps * FPS_TOLERANCE, f"lowest {c.min_fps:.2f} fps (goal {goals.fps:g})")
    else:
        late, late_alone = c.lateness_p99_ms, alone.lateness_p99_ms if alone is not None else None
        if late is not None and late_alone is not None:
            limit = max(late_alone, 0.0) * goals.lateness + goals.slack
            said = condition_figure(c, "lateness", 0.99).labelled(unit="ms")
            note(late <= limit + EPS, f"lateness {said} (alone {late_alone:.1f}, at most {limit:.1f})")
        listener = _listener(c.listeners, goals.lookahead)
        if listener is not None:
            note(listener.underruns <= goals.underruns,
                 f"{listener.underruns} underruns at {goals.lookahead:g} ms lookahead")  # fmt: skip
    if c.llm is not None and c.llm.tok_s_share is not None:
        kept = kept_text(c.llm)
        note(c.llm.tok_s_share >= goals.llm, f"the LLM kept {kept} of its tok/s alone (goal {goals.llm:.0%})")
    return missed, held


def kept_text(llm: LlmFigures) -> str:
    """The share of its rate alone the LLM kept, as a share is printed (core.figures): never above 100% as a fact,
    with its interval over the rounds where there are two or more (``no measurable loss: 99% [93, 106]``)."""
    return share_text(llm.tok_s_share, llm.tok_s_share_low, llm.tok_s_share_high)


def _listener(listeners: Sequence[ListenerFigures], lookahead: float) -> ListenerFigures | None:
    return next((lf for lf in listeners if lf.lookahead_ms == lookahead), None)
