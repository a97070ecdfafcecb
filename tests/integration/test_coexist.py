"""coexist end to end: the HTTP probe against a real streaming TTS (espeak-ng behind a small streaming endpoint,
tests/fixtures/espeak_tts.py), and a CPU run of all four conditions against the embedded engine."""

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

import httpx
import pytest

from servelab.bench import resolve_targets
from servelab.coexist import CoexistOptions, LlmLoad, run_coexist
from servelab.coexist.audio_stream import parse_wav_header
from servelab.coexist.playback import Utterance
from servelab.coexist.probes import HttpAudioProbe, WorkerProbe, WorkerSpec
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


def _responsive(url: str, limit_s: float = 300.0) -> float:
    """Wait until the engine answers an 8-token request within 5 s: these runs give each LLM request only its
    condition's seconds, and a test before may have left the engine busy (a long prefill it has not yet seen cut
    off). Returns the last latency; fails with it if the engine stays slow."""
    deadline, latency = time.monotonic() + limit_s, float("inf")
    body = {"model": "smollm2-135m-instruct", "prompt": "Count to ten:", "max_tokens": 8, "temperature": 0}
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            ok = httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code == 200
        except httpx.HTTPError:
            ok = False
        latency = time.monotonic() - began
        if ok and latency < 5:
            return latency
        time.sleep(1)
    pytest.fail(f"the embedded engine still took {latency:.1f} s for 8 tokens after {limit_s:g} s")


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


@pytest.mark.integration
def test_cpu_probe_beside_the_embedded_engine_all_four_conditions(engine: object, tmp_path: Path) -> None:
    from tests.integration.conftest import TEST_PORT

    _responsive(f"http://127.0.0.1:{TEST_PORT}")
    target = resolve_targets([("embedded", f"http://127.0.0.1:{TEST_PORT}")])[0]
    # one utterance due every 2 s: each condition lasts long enough for LLM requests to finish beside the probe
    probe = WorkerProbe(WorkerSpec("cpu", "voice", dim=256, layers=4, ffn=768, chunks=20, period_ms=2000))
    options = CoexistOptions(
        repeats=1,
        utterances=3,
        load=LlmLoad(decode_streams=2, decode_tokens=16, prefill_tokens=1500),
        settle_s=3.0,  # so requests of each kind finish within the condition on a 2-core machine
        sharing={"mode": "time-sliced"},
    )
    with RunStore(tmp_path / "runs.sqlite") as db:
        result = run_coexist(db, probe, target, options)
        records = db.records(result.run_id)
        info = db.get_run(result.run_id)
    assert result.failed is None, result.failed
    baselines = ["llm:decode", "llm:prefill", "llm:decode+prefill"]
    assert [c.condition for c in result.conditions] == ["alone", "decode", "prefill", "both", *baselines]
    for figs in result.conditions[:4]:
        assert figs.utterances == 3 and figs.chunks == 60 and figs.interval_p99_ms is not None
    labels = {r.scenario for r in records}
    assert {"llm-decode@decode", "llm-prefill@prefill", "llm-decode@both", "llm-prefill@both"} <= labels
    assert not any(r.scenario.endswith("@alone") for r in records)
    assert {r.labels.condition for r in records} == {"decode", "prefill", "both", *baselines}
    # the LLM's side: each load's throughput beside the probe over the same load with no probe, judged
    for figs in result.conditions[1:4]:
        assert figs.llm is not None and figs.llm.tok_s_share is not None and figs.llm.tok_s_share > 0
        assert figs.verdict is not None and "the LLM kept" in figs.verdict
    assert all(c.utterances == 0 and c.llm is not None and c.llm.ok for c in result.conditions[4:])
    assert any(r.ok for r in records if r.scenario == "llm-decode@decode")
    assert all(r.ok or r.error == "cancelled" for r in records), [r.error_detail for r in records if r.error]
    prefill = [r for r in records if r.scenario.startswith("llm-prefill") and r.ok]
    assert prefill and all(r.prompt_tokens and r.prompt_tokens >= 1400 for r in prefill)
    assert all(not r.cached_tokens for r in prefill), "a long prompt hit the prefix cache"
    assert info.status == "complete"
    assert result.probe["probe"] == "cpu" and "params" in result.probe


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


class _LeaseWatcher:
    """A scripted probe (the probe is not what is tested) that asks the gateway, while it "speaks", whether the
    realtime lease is held."""

    kind = "watcher"

    def __init__(self, gateway: str) -> None:
        self.gateway, self.seen = gateway, {}  # type: dict[str, bool]

    async def start(self) -> dict[str, object]:
        return {"probe": self.kind}

    async def run(self, utterances: int, condition: str) -> list[Utterance]:

        from servelab.coexist.playback import Chunk

        async with httpx.AsyncClient(headers={"Authorization": "Bearer admin-key"}) as client:
            state = (await client.get(f"{self.gateway}/admin/state")).json()
        self.seen[condition] = bool(state["realtime"])
        await asyncio.sleep(1.5)  # long enough for the LLM load's requests to finish beside it
        t = time.perf_counter()
        return [Utterance(t, tuple(Chunk(t + 0.01 * (i + 1), 0.04) for i in range(10)), condition)]

    async def close(self) -> None:
        pass


@pytest.mark.integration
def test_a_gateway_mitigation_holds_the_lease_while_the_probe_speaks(engine: object, tmp_path: Path) -> None:
    """The plain target, then the same LLM load through a real servelab gateway in front of the embedded engine:
    the gateway's realtime lease is on exactly while the probe speaks in the gateway's condition, its LLM requests
    go through the gateway, the share is against the plain load with no probe, and a verdict per mitigation."""
    from servelab.coexist import Lease, Mitigation, mitigation_lines
    from servelab.gateway import GatewayConfig, running
    from servelab.gateway.config import Keys, Policy, Upstream
    from tests.integration.conftest import TEST_PORT

    engine_url = f"http://127.0.0.1:{TEST_PORT}"
    _responsive(engine_url)
    config = GatewayConfig(port=0, local=Upstream(url=engine_url, connect_timeout_s=2),
                           policy=Policy(health_interval_s=0.2, min_hold_s=0),
                           keys=Keys(admin=["admin-key"]))  # fmt: skip
    with running(config) as (gw_url, _):
        direct, through = resolve_targets([("embedded", engine_url), ("gw", gw_url)])
        probe = _LeaseWatcher(gw_url)
        gateway = Mitigation("gw", through, Lease(gw_url, "admin-key", ttl_s=3))
        options = CoexistOptions(conditions=("alone", "decode"), repeats=1, utterances=1, settle_s=1.0,
                                 load=LlmLoad(decode_streams=1, decode_tokens=8), mitigations=(gateway,))  # fmt: skip
        with RunStore(tmp_path / "runs.sqlite") as db:
            result = run_coexist(db, probe, direct, options)
            records = db.records(result.run_id)

        after = httpx.get(f"{gw_url}/admin/state", headers={"Authorization": "Bearer admin-key"}).json()
    assert result.failed is None, result.failed
    assert [c.condition for c in result.conditions] == ["alone", "decode", "gw/decode", "llm:decode"]
    assert probe.seen == {"alone": False, "decode": False, "gw/decode": True} and after["realtime"] is False
    through_gw = [r for r in records if r.labels.condition == "gw/decode"]
    assert through_gw and any(r.ok for r in through_gw) and {r.target for r in through_gw} == {"gw"}
    by = {c.condition: c for c in result.conditions}
    assert by["gw/decode"].llm is not None and by["gw/decode"].llm.tok_s_share is not None
    lines = mitigation_lines(result.conditions)
    assert any(line.startswith("gw: ") for line in lines) and any(line.startswith("no mitigation: ") for line in lines)
