"""Mitigations as condition sets: each is the LLM load sent elsewhere (a gateway that keeps voice safe, an engine
started with a smaller ``--max-num-batched-tokens``, one under an MPS cap), run through the same conditions as the
plain target, so one run and one report say which keeps the voice within the goals and at what cost to the LLM.

A mitigation through ``servelab gateway`` holds a realtime lease of its own while the probes speak (``POST
/admin/realtime`` with its lease id, renewed at a third of its TTL, released after), so long prefills go to its
external route exactly while they would hurt, and another session's lease never ends it. Condition names carry the
mitigation: ``gateway/prefill``; the LLM's share is always against the plain target's load with no probe
(``llm:prefill``), so a mitigation that slows the LLM shows the cost."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from servelab.coexist.conditions import parse_condition
from servelab.coexist.goals import kept_text
from servelab.core.errors import UsageError
from servelab.core.results import ConditionFigures
from servelab.core.urls import server_root
from servelab.load.runner import Target


@dataclass(frozen=True, slots=True)
class Lease:
    """A servelab gateway's realtime lease, held with its admin key."""

    url: str  # the gateway (its root or its /v1)
    admin_key: str
    ttl_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Mitigation:
    name: str
    target: Target
    lease: Lease | None = None


def mitigated(conditions: Sequence[str], mitigations: Sequence[Mitigation]) -> tuple[str, ...]:
    """The conditions, then each mitigation's copy of every one with LLM load (``NAME/condition``)."""
    names = {m.name for m in mitigations}
    if len(names) < len(mitigations) or any("/" in n or ":" in n or not n for n in names):
        raise UsageError("each --mitigation needs its own NAME (no '/' or ':'), like gateway=http://127.0.0.1:8900")
    extra = [f"{m.name}/{c}" for m in mitigations for c in conditions if _probed_llm(c)]
    return tuple(conditions) + tuple(extra)


def _probed_llm(name: str) -> bool:
    condition = parse_condition(name)
    return condition.llm and condition.probes


class LeaseHolder:
    """Holds the lease from ``start()`` to ``stop()``; a refusal is an error with the gateway's words."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.lease_id = f"coexist-{uuid.uuid4().hex[:12]}"  # its own lease: another session's never ends it
        self._client = httpx.AsyncClient(
            base_url=server_root(lease.url), headers={"Authorization": f"Bearer {lease.admin_key}"}, timeout=5.0
        )
        self._task: asyncio.Task[None] | None = None

    async def _set(self, active: bool) -> None:
        body = {"active": active, "lease": self.lease_id, **({"ttl_s": self.lease.ttl_s} if active else {})}
        resp = await self._client.post("/admin/realtime", json=body)
        if resp.status_code != 200:
            raise UsageError(f"the gateway refused the realtime lease: HTTP {resp.status_code}: {resp.text[:200]}")

    async def start(self) -> None:
        await self._set(True)
        self._task = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease.ttl_s / 3)
            await self._set(True)

    async def stop(self) -> list[str]:
        """Release the lease; say so if a renewal failed while it was held (the probe then spoke unprotected)."""
        notes = []
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # a cancellation of this caller still reaches it
            if not self._task.cancelled() and self._task.exception() is not None:
                exc = self._task.exception()
                notes.append(f"the realtime lease lapsed while the probe spoke: {type(exc).__name__}: {exc}")
        try:
            await self._set(False)
        finally:
            await self._client.aclose()
        return notes


def mitigation_lines(conditions: Sequence[ConditionFigures]) -> list[str]:
    """Per mitigation (the plain target first): how many of its conditions met the goals, and the LLM's share."""
    groups: dict[str, list[ConditionFigures]] = {}
    for c in conditions:
        if c.meets is None or not parse_condition(c.condition).llm:
            continue
        name = parse_condition(c.condition).mitigation or "no mitigation"
        groups.setdefault(name, []).append(c)
    return [_mitigation_line(name, mine) for name, mine in groups.items()]


def _mitigation_line(name: str, conditions: Sequence[ConditionFigures]) -> str:
    """``no mitigation: the voice meets the goals in all 3 conditions with LLM load, and the LLM kept between 87%
    and 99% of its throughput alone.`` (each share as core.figures prints it)."""
    met, n = sum(bool(c.meets) for c in conditions), len(conditions)
    said = f"meets the goals in all {n} conditions" if met == n else f"misses the goals in {n - met} of {n} conditions"
    if n == 1:
        said = "meets the goals in its condition" if met else "misses the goals in its condition"
    kept = sorted((c.llm for c in conditions if c.llm is not None and c.llm.tok_s_share is not None),
                  key=lambda llm: llm.tok_s_share or 0.0)  # fmt: skip
    if not kept:
        return f"{name}: {said} with LLM load."
    low, high = kept_text(kept[0]), kept_text(kept[-1])
    share = low if len(kept) == 1 or low == high else f"between {low} and {high}"
    return f"{name}: {said} with LLM load, and the LLM kept {share} of its throughput alone."
