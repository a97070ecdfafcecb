"""The embedded engine, started once per test session on its own port, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servelab.engines.embedded import EmbeddedEngine, EngineSettings, EngineState

TEST_PORT = 18765


@pytest.fixture(scope="session")
def engine() -> Iterator[EngineState]:
    embedded = EmbeddedEngine(EngineSettings(port=TEST_PORT, instance="test-engine"))
    state = embedded.up()
    yield state
    if not state.reused:
        embedded.down()


@pytest.fixture(scope="session")
def engine_handle(engine: EngineState) -> EmbeddedEngine:
    return EmbeddedEngine(EngineSettings(port=TEST_PORT, instance="test-engine"))
