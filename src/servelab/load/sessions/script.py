"""What each session does, drawn once from a seed: its head's length and, per turn, whether it is a tool turn, how
much new content it adds, how long a reply it asks for and the think (or tool) time before it. The same seed,
spec and session index always give the same script."""

from __future__ import annotations

import random
from dataclasses import dataclass

from servelab.load.sessions.spec import SessionSpec


@dataclass(frozen=True, slots=True)
class TurnScript:
    index: int  # from 1
    tool: bool  # an assistant tool call and its result, rather than a user message
    new_tokens: int  # the content the turn adds
    output_tokens: int  # the reply it asks for
    think_s: float  # after the previous answer, before this turn is sent (0 for the first)


@dataclass(frozen=True, slots=True)
class SessionScript:
    session: int
    head_tokens: int  # the whole head, the shared part included
    turns: tuple[TurnScript, ...]


def session_script(spec: SessionSpec, session: int, seed: int = 0) -> SessionScript:
    """Session ``session``'s script, from its own random stream (sessions never share draws)."""
    rng = random.Random(f"{seed}:{spec.name}:{session}")
    head = spec.head_tokens.draw(rng)
    turns = []
    for index in range(1, spec.turns + 1):
        tool = index > 1 and rng.random() < spec.tool_share  # a tool answers a call the previous reply made
        new, out = spec.turn_tokens.draw(rng), spec.output_tokens.draw(rng)
        think = spec.think_time_s.draw(rng) if index > 1 else 0.0
        turns.append(TurnScript(index, tool, new, out, think))
    return SessionScript(session, head, tuple(turns))
