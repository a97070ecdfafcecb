"""Shared fixtures: the SSE fixture server (a subprocess) and the embedded engine (started once)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURE_SERVER = Path(__file__).parent / "fixtures" / "sse_fixture.py"


@pytest.fixture(scope="session")
def fixture_server() -> Iterator[str]:
    """Base URL of the SSE fixture server, in its own process (so it has its own core)."""
    proc = subprocess.Popen([sys.executable, str(FIXTURE_SERVER)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture()
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.sqlite"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests without the embedded engine first: the engine's CPU threads keep the 2 cores busy while
    it is up, and the timing tests want a quiet machine. Tests that stop the engine run last."""

    def order(item: pytest.Item) -> tuple[bool, bool]:
        uses_engine = bool({"engine", "engine_handle", "external_engine"} & set(getattr(item, "fixturenames", ())))
        return item.get_closest_marker("stops_engine") is not None, uses_engine

    items.sort(key=order)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stops_engine: stops the shared embedded engine; runs last")
    os.environ.setdefault("SERVELAB_ENGINE_PORT", "18765")
