"""A session workload as a bench scenario: a preset by name or the user's spec file, with the command line's
overrides (``--turns``, ``--think-time``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from servelab.core.errors import UsageError
from servelab.load.scenarios import Scenario
from servelab.load.sessions.spec import PRESETS, SessionSpec, Think, preset, read_spec


def session_scenario(spec: str) -> Scenario | None:
    """The scenario of a session preset name or a ``.toml`` spec file; None for anything else."""
    if spec in PRESETS:
        return of_spec(preset(spec))
    if spec.endswith(".toml"):
        path = Path(spec)
        if not path.is_file():
            raise UsageError(f"no session spec file {spec}")
        return of_spec(read_spec(path))
    return None


def of_spec(spec: SessionSpec) -> Scenario:
    """A scenario running ``spec``: its sessions at once (the scenario's concurrency), its longest reply as the
    scenario's output length (what a context check reads)."""
    return Scenario(
        name=spec.name,
        description=spec.description or f"{spec.sessions} sessions of {spec.turns} turns",
        max_tokens=spec.output_tokens.high,
        concurrency=spec.sessions,
        sessions=spec,
    )


def with_session_options(
    scenarios: Sequence[Scenario],
    *,
    sessions: int | None,
    turns: int | None,
    think_time: str | None,
    ramp: float | None = None,
) -> list[Scenario]:
    """The session scenarios with the command line's sessions, turns, think time and ramp; the others as they
    were. Any of these given without a session scenario is refused."""
    if not any(s.sessions for s in scenarios) and (sessions or turns or think_time or ramp is not None):
        raise UsageError(
            "--sessions, --turns, --think-time and --ramp need a session scenario",
            hint=f"--scenario {' or '.join(PRESETS)}, or a session spec (.toml)",
        )
    think = parse_think(think_time) if think_time else None
    out = []
    for s in scenarios:
        if s.sessions is None:
            out.append(s)
            continue
        update: dict[str, object] = {"sessions": sessions, "turns": turns, "think_time_s": think, "ramp_s": ramp}
        spec = s.sessions.model_copy(update={k: v for k, v in update.items() if v is not None})
        out.append(replace(s, sessions=spec, concurrency=spec.sessions))
    return out


def parse_think(text: str) -> Think:
    """``2`` (seconds), ``0.5-3`` (uniform) or ``exp:2`` (exponential, mean 2 s)."""
    try:
        if text.startswith("exp:"):
            return Think.model_validate({"exponential": float(text.removeprefix("exp:"))})
        low, _, high = text.partition("-")
        return Think.model_validate([float(low), float(high or low)])
    except ValueError:
        raise UsageError(
            f"--think-time wants seconds, LOW-HIGH or exp:MEAN, got {text!r}", hint="like 2, 0.5-3 or exp:2"
        ) from None
