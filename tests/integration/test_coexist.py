"""coexist end to end: the HTTP probe against a real streaming TTS (espeak-ng behind a small streaming endpoint,
tests/fixtures/espeak_tts.py). The runs beside the embedded engine are in test_beside_the_engine.py."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.coexist import CoexistOptions, run_coexist
from servelab.coexist.audio_stream import parse_wav_header
from servelab.coexist.playback import Utterance
from servelab.coexist.probes import HttpAudioProbe
from servelab.core.results import CoexistRun, load_result
from servelab.core.store import RunStore
from servelab.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Streaming speech arrives in pieces, and every piece must come before the last one has been played."


@pytest.fixture(scope="module")
def tts_url() -> Iterator[str]:
    if shutil.which("espeak-ng") is None:
        if os.environ.get("CI"):
            pytest.fail("espeak-ng is missing; `make test` installs it", pytrace=False)
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.fixtures.espeak_tts", "--port", str(port)], cwd=ROOT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/v1/audio/speech"
    proc.terminate()
    proc.wait(timeout=10)


def _espeak_seconds(text: str) -> float:
    """How much audio espeak-ng makes of ``text``, from its own output read whole."""
    wav = subprocess.run(["espeak-ng", "--stdout", "-v", "en", text], capture_output=True, check=True).stdout
    parsed = parse_wav_header(wav)
    assert parsed is not None
    fmt, offset = parsed
    return (len(wav) - offset) // (fmt.channels * fmt.sample_bytes) / fmt.sample_rate


def _utterances(probe: HttpAudioProbe, count: int) -> list[Utterance]:
    async def go() -> list[Utterance]:
        try:
            return await probe.run(count, "alone")
        finally:
            await probe.close()

    return asyncio.run(go())


@pytest.mark.parametrize("audio_format", ["wav", "pcm"])
def test_http_probe_times_every_chunk_of_real_speech(tts_url: str, audio_format: str) -> None:
    from servelab.coexist.audio_stream import AudioFormat

    probe = HttpAudioProbe(tts_url, text=TEXT, audio_format=audio_format, pcm=AudioFormat(sample_rate=22050))
    got = _utterances(probe, 2)
    expected = _espeak_seconds(TEXT)
    assert expected > 2.0
    for u in got:
        assert u.error is None
        assert len(u.chunks) > 3, "the audio came in one piece: not streamed"
        arrivals = [c.arrived_s for c in u.chunks]
        assert arrivals == sorted(arrivals) and arrivals[0] > u.scheduled_s
        # every sample counted once, header excluded, whichever format
        assert sum(c.audio_s for c in u.chunks) == pytest.approx(expected, abs=1 / 22050)


@pytest.mark.parametrize(
    ("shape", "extra"),
    [("sse", {}), ("sse", {"delta_wav": True}), ("websocket", {})],
    ids=["sse-pcm-deltas", "sse-wav-deltas", "websocket"],
)
def test_http_probe_reads_every_sample_in_the_other_servers_shapes(
    tts_url: str, shape: str, extra: dict[str, object]
) -> None:
    """vLLM-Omni's SSE events (base64 PCM, or a whole WAV per delta as some servers send) and its websocket, against
    real espeak-ng speech: every sample counted once, in more than one piece, exactly as espeak-ng's own output."""
    from servelab.coexist.audio_stream import AudioFormat

    url = tts_url + "/stream" if shape == "websocket" else tts_url
    probe = HttpAudioProbe(url, text=TEXT, audio_format="pcm", pcm=AudioFormat(sample_rate=22050), shape=shape,
                           extra=extra)  # fmt: skip
    got = _utterances(probe, 2)
    expected = _espeak_seconds(TEXT)
    for u in got:
        assert u.error is None
        assert len(u.chunks) > 3, "the audio came in one piece: not streamed"
        assert sum(c.audio_s for c in u.chunks) == pytest.approx(expected, abs=1e-9)
        assert [c.arrived_s for c in u.chunks] == sorted(c.arrived_s for c in u.chunks)


def test_the_request_body_is_the_users(tts_url: str) -> None:
    """Model, voice and the user's extra fields make the request body, the shape's streaming fields beside them."""
    probe = HttpAudioProbe(tts_url, text=TEXT, model="kokoro", voice="af_heart", shape="sse",
                           extra={"speed": 1.0, "language": "English"})  # fmt: skip
    body = probe.body()
    assert body["model"] == "kokoro" and body["voice"] == "af_heart" and body["stream_format"] == "sse"
    assert body["speed"] == 1.0 and body["language"] == "English" and body["stream"] is True
    audio = HttpAudioProbe(tts_url, shape="audio", extra={"stream_format": "audio", "sample_rate": 8000}).body()
    assert audio["stream_format"] == "audio" and audio["sample_rate"] == 8000


def test_http_probe_reports_a_refusal(tts_url: str) -> None:
    probe = HttpAudioProbe(tts_url, text="", audio_format="wav")
    got = _utterances(probe, 1)
    assert got[0].error is not None and got[0].error.startswith("HTTP 400")


def test_coexist_run_with_the_http_probe_alone(tts_url: str, tmp_path: Path) -> None:
    probe = HttpAudioProbe(tts_url, text=TEXT, audio_format="wav")
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_coexist(db, probe, None, CoexistOptions(conditions=("alone",), repeats=2, utterances=2))
        stored = load_result(db, db.get_run(result.run_id))
        raw = db.summaries(result.run_id)
    (alone,) = result.conditions
    assert alone.utterances == 4 and alone.errors == 0 and alone.chunks > 12
    assert alone.rtf_mean is not None and alone.rtf_mean < 1.0  # espeak-ng is far faster than real time
    assert isinstance(stored, CoexistRun) and stored.sharing == {"mode": "time-sliced"}
    assert stored.conditions == result.conditions
    assert len(raw["coexist/utterances"]["utterances"]) == 4


def test_coexist_cli_with_the_websocket_probe(tts_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`servelab coexist --probe http --tts-shape websocket` alone, against espeak-ng's websocket: figures, no error."""
    import json

    from servelab.cli import main

    argv = ["coexist", "--probe", "http", "--tts-url", tts_url + "/stream", "--tts-shape", "websocket",
            "--audio-format", "pcm", "--conditions", "alone", "--repeats", "1", "--utterances", "2",
            "--tts-body", '{"language": "English"}', "--json", "--store", str(tmp_path / "runs.sqlite")]  # fmt: skip
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    (alone,) = got["conditions"]
    assert alone["utterances"] == 2 and alone["errors"] == 0 and alone["chunks"] > 6
