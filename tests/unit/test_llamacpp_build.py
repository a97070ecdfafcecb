"""The llama-server build's choices, without building (the integration tests start the cached binary)."""

from pathlib import Path

import pytest

from servelab.core.errors import EngineError
from servelab.engines import llamacpp_build as b


def test_the_cache_key_follows_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    key = b.build_key()
    assert key.startswith(b.VERSION + "-")
    monkeypatch.setattr(b, "CMAKE_FLAGS", (*b.CMAKE_FLAGS, "-DGGML_OPENMP=OFF"))
    assert b.build_key() != key  # other flags: another folder, built anew


def test_never_native_avx512_or_amx() -> None:
    flags = " ".join((*b.CMAKE_FLAGS, *b.cpu_flags()))
    assert "-DGGML_NATIVE=OFF" in flags and "AVX512" not in flags and "AMX" not in flags
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in flags  # its assets would come from a Hugging Face bucket


def test_an_override_that_does_not_run_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SERVELAB_LLAMA_SERVER", str(fake))
    assert not b.usable(fake)
    with pytest.raises(EngineError, match="not a runnable llama-server"):
        b.build()


def test_an_sdist_without_llama_cpp_sources_is_refused(tmp_path: Path) -> None:
    import tarfile

    archive = tmp_path / "other.tar.gz"
    (tmp_path / "x.txt").write_text("x")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "x.txt", arcname="other-1.0/x.txt")
    with pytest.raises(EngineError, match="not the llama-cpp-python sdist"):
        b._extract(archive, tmp_path / "out")
