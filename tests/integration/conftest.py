"""The embedded engine, started once per test session on its own port, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servelab.engines.embedded import EmbeddedEngine, EngineSettings, EngineState

TEST_PORT = 18765


def _served(server: EmbeddedEngine) -> Iterator[EngineState]:
    """Up for the session; stopped at its end unless it was already running (then it is left as found)."""
    state = server.up()
    yield state
    if not state.reused:
        server.down()


@pytest.fixture(scope="session")
def engine() -> Iterator[EngineState]:
    yield from _served(EmbeddedEngine(EngineSettings(port=TEST_PORT, instance="test-engine")))


@pytest.fixture(scope="session")
def engine_handle(engine: EngineState) -> EmbeddedEngine:
    return EmbeddedEngine(EngineSettings(port=TEST_PORT, instance="test-engine"))


EXTERNAL_PORT = 18766
EXTERNAL_KEY = "external-test-key"
EXTERNAL_KEY_ENV = "SERVELAB_TEST_EXTERNAL_KEY"


@pytest.fixture(scope="session")
def external_engine(engine: EngineState) -> Iterator[EngineState]:
    """A second real OpenAI-compatible server for the gateway's external route: another embedded vLLM, which
    wants an API key (so a wrong key gets a real 401)."""
    import os

    os.environ[EXTERNAL_KEY_ENV] = EXTERNAL_KEY
    settings = EngineSettings(port=EXTERNAL_PORT, instance="test-external", extra_args=("--api-key", EXTERNAL_KEY))
    yield from _served(EmbeddedEngine(settings))


LLAMACPP_PORT = 18767


@pytest.fixture(scope="session")
def llamacpp_engine() -> Iterator[EngineState]:
    """llama.cpp's own llama-server (built once into the cache by make test) serving SmolLM2's GGUF."""
    from servelab.engines.llamacpp import LlamaServerEngine, llamacpp_settings

    yield from _served(LlamaServerEngine(llamacpp_settings(port=LLAMACPP_PORT, instance="test-llamacpp")))
