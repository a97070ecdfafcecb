"""Where a request goes, in a fixed order: maintenance, local unhealthy, realtime active; then the cost gate
(prompt tokens over the threshold; while realtime is active also a budget of in-flight local prefill tokens);
then the local backend."""

from __future__ import annotations

from dataclasses import dataclass

LOCAL, EXTERNAL = "local", "external"


@dataclass(frozen=True)
class Facts:
    prompt_tokens: int
    maintenance: bool
    local_healthy: bool
    realtime: bool
    local_prefill_tokens: int  # already in flight on the local engine


@dataclass(frozen=True)
class Decision:
    route: str
    reason: str


def decide(facts: Facts, threshold: int, realtime_budget: int) -> Decision:
    if facts.maintenance:
        return Decision(EXTERNAL, "maintenance")
    if not facts.local_healthy:
        return Decision(EXTERNAL, "local_unhealthy")
    if facts.realtime:
        if facts.prompt_tokens > threshold:
            return Decision(EXTERNAL, "realtime_long_prefill")
        if facts.local_prefill_tokens + facts.prompt_tokens > realtime_budget:
            return Decision(EXTERNAL, "realtime_prefill_budget")
        return Decision(LOCAL, "realtime_short")
    if facts.prompt_tokens > threshold:
        return Decision(EXTERNAL, "long_prefill")
    return Decision(LOCAL, "default")
