"""The prefix-cache truth fixture (servelab.testing.cache_sim, not an LLM) in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from servelab.load.runner import Target

CACHE_SIM = "from servelab.testing.cache_sim import main; main()"


@pytest.fixture()
def cache_sim(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The fixture with the test's arguments (``@pytest.mark.parametrize("cache_sim", [[...]], indirect=True)``),
    as a resolved target (its context stated)."""
    args = [str(a) for a in getattr(request, "param", [])]
    proc = subprocess.Popen([sys.executable, "-c", CACHE_SIM, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    context = int(args[args.index("--context") + 1]) if "--context" in args else 8192
    yield Target("sim", f"http://127.0.0.1:{port}/v1", "cache-sim", max_model_len=context)
    proc.kill()
    proc.wait(timeout=10)
