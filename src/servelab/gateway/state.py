"""The flags the policy reads: maintenance, realtime (a lease with a TTL, so a crashed TTS cannot pin it on),
local health; every flag with hysteresis: once changed it holds at least ``min_hold_s``."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Flag:
    on: bool = False
    changed_at: float = -math.inf
    until: float | None = None  # a lease: off at this time unless renewed
    off_requested: bool = False  # asked off while still inside its hold time

    def set(self, on: bool, now: float, min_hold: float, ttl: float | None = None) -> None:
        if ttl is not None and not (math.isfinite(ttl) and ttl > 0):
            raise ValueError(f"a lease's ttl must be a finite number of seconds over 0, not {ttl!r}")
        if on:
            self.until = now + ttl if ttl else None
            self.off_requested = False
            if not self.on:
                self.on, self.changed_at = True, now
            return
        self.off_requested = True
        self.settle(now, min_hold)

    def held_until(self, min_hold: float) -> float | None:
        """When a flag asked off inside its hold time goes off (Unix time); None when it is not held."""
        return self.changed_at + min_hold if self.on and self.off_requested else None

    def settle(self, now: float, min_hold: float) -> bool:
        """Apply what is due (an expired lease, an off request past the hold) and say whether it is on."""
        if self.on and self.until is not None and now >= self.until:
            self.off_requested = True
        if self.on and self.off_requested and now - self.changed_at >= min_hold:
            self.on, self.changed_at, self.until, self.off_requested = False, now, None, False
        return self.on


@dataclass
class Health:
    """Local upstream health from periodic checks: down after ``unhealthy_after`` failures in a row, up again
    after ``healthy_after`` successes in a row (a flapping check does not flip routing each time)."""

    healthy: bool = True
    failures: int = 0
    successes: int = 0
    last_error: str = ""

    def record(self, ok: bool, unhealthy_after: int, healthy_after: int, error: str = "") -> None:
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if not self.healthy and self.successes >= healthy_after:
                self.healthy = True
        else:
            self.failures, self.successes, self.last_error = self.failures + 1, 0, error
            if self.healthy and self.failures >= unhealthy_after:
                self.healthy = False
