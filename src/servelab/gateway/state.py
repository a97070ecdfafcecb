"""Local upstream health, with hysteresis (the shared flags and leases are the store's: :mod:`.store`)."""

from __future__ import annotations

from dataclasses import dataclass


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
