"""For verdict tests about the server side, run against the fake engine: the load process is never judged the limit,
whatever this machine's other work does to its CPU share and event loop (a busy box once read the load process as
the limit in a test about the server's frontend). The client's own rules are tested on generated evidence
(test_bench_verdict_held.py) and in tests that starve the client on purpose."""

from __future__ import annotations

import math

import pytest

CLIENT_RULES = ("CLIENT_CPU", "CLIENT_BUSY_CPU", "CLIENT_LATE_SHARE", "CLIENT_LOOP_LAG_MS", "CLIENT_READ_LATE_MS")


def client_never_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client threshold out of reach: the verdict is the server side's, from the fixture's own evidence."""
    import servelab.bench.verdict as verdict

    for name in CLIENT_RULES:
        monkeypatch.setattr(verdict, name, math.inf)
