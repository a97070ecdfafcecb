"""Realtime probes behind one interface: each gives utterances (chunk arrival times and the audio each carries)
on the run's clock (``perf_counter``), so the playback model and the statistics need not know which probe ran.

- ``WorkerProbe``: the stand-in decoder of ``worker.py`` in its own process, on a GPU (torch, CUDA graph) or on
  the CPU (numpy), voice or avatar-like frames.
- ``HttpAudioProbe``: any server that streams speech: chunked PCM or WAV, OpenAI ``speech.audio.delta`` SSE
  events or vLLM-Omni's websocket (``audio_stream.py``); each chunk's duration comes from its bytes and the
  sample format.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from servelab.coexist.audio_stream import (
    SHAPES,
    AudioBytes,
    AudioFormat,
    SseAudio,
    websocket_config,
    websocket_url,
)
from servelab.coexist.playback import Chunk, Utterance
from servelab.core.errors import UsageError
from servelab.load.arrivals import OpenLoop

ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class Probe(Protocol):
    kind: str

    async def start(self) -> dict[str, Any]: ...

    async def run(self, utterances: int, condition: str) -> list[Utterance]: ...

    async def close(self) -> None: ...


@dataclass
class WorkerSpec:
    device: str = "cpu"  # cpu (numpy) or cuda[:N] (torch)
    mode: str = "voice"  # voice or frames
    dim: int = 1024
    layers: int = 28
    ffn: int = 3072
    steps_per_chunk: int = 2
    chunk_ms: float = 40.0
    chunks: int = 50
    pause_ms: float = 300.0
    period_ms: float = 0.0  # utterances due this often; 0: each one's audio plus the pause (one voice talking)
    fps: int = 25
    green_sms: int = 0
    env: dict[str, str] = field(default_factory=dict)  # e.g. CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for the probe

    def environment(self) -> dict[str, str]:
        """The worker's environment: this process's, then one BLAS/OpenMP thread for the CPU stand-in, then the
        spec's own. A decoder stepping one token at a time has nothing worth splitting, and a pool's hand-offs wait
        behind whatever else the cores run (CI once saw the stand-in, with OpenBLAS's pool of two, give nothing for
        126 s beside the embedded engine); with one thread its progress needs only its own share of a core."""
        one = {name: "1" for name in ONE_THREAD} if self.device == "cpu" else {}
        return {**os.environ, **one, **self.env}

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "servelab.coexist.worker", "--device", self.device, "--mode", self.mode]
        args += ["--backend", "numpy" if self.device == "cpu" else "torch"]
        for name in (
            "dim",
            "layers",
            "ffn",
            "steps_per_chunk",
            "chunk_ms",
            "chunks",
            "pause_ms",
            "period_ms",
            "fps",
            "green_sms",
        ):
            args += [f"--{name.replace('_', '-')}", str(getattr(self, name))]
        return args


class WorkerProbe:
    """The stand-in decoder in a child process, driven over its stdin and read from its stdout.

    The worker runs in its own session, as the engines servelab starts do: Linux weighs CPU time between sessions
    (autogroups) before tasks within one, so a worker left in the caller's session gets that session's share,
    split with everything else the caller runs, against a whole share for the engine. A CI runner's session
    holding a low share once starved the stand-in for 126 s beside the embedded engine (decode lateness p99 2.8 ms
    in a session of its own, 3 s with the caller's session at autogroup nice 19). On its own it is one service
    beside another, as a voice process and an LLM server are on a real host; it still reads its commands from
    the pipe, so it ends when the caller does."""

    def __init__(self, spec: WorkerSpec, ready_timeout: float = 300.0, stall_timeout: float = 120.0) -> None:
        self.spec, self.ready_timeout = spec, ready_timeout
        self.stall_timeout = stall_timeout  # the longest wait for the next utterance beyond its schedule
        self.kind = "gpu" if spec.device.startswith("cuda") else "cpu"
        if spec.mode == "frames":
            self.kind += "-frames"
        self._proc: asyncio.subprocess.Process | None = None
        self._stack: str | None = None  # where the worker writes its stack when asked (SIGUSR1)

    async def start(self) -> dict[str, Any]:
        handle, self._stack = tempfile.mkstemp(prefix="servelab-probe-", suffix=".stack")
        os.close(handle)
        argv = [*self.spec.argv(), "--stack-file", self._stack]
        self._proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=self.spec.environment(),
            limit=1 << 24, start_new_session=True,
        )  # fmt: skip
        line = await asyncio.wait_for(self._line(), self.ready_timeout)
        if "ready" not in line:
            raise UsageError(f"the {self.kind} probe did not start: {line}")
        return {"probe": self.kind, **line["ready"]}

    async def _line(self) -> dict[str, Any]:
        assert self._proc and self._proc.stdout
        raw = await self._proc.stdout.readline()
        if not raw:
            code = await self._proc.wait()
            command = " ".join(self.spec.argv())
            raise UsageError(f"the {self.kind} probe exited (code {code}); run `{command}` to see why")
        data: dict[str, Any] = json.loads(raw)
        return data

    async def run(self, utterances: int, condition: str) -> list[Utterance]:
        assert self._proc and self._proc.stdin
        self._proc.stdin.write(f"run {utterances}\n".encode())
        await self._proc.stdin.drain()
        out: list[Utterance] = []
        while "done" not in (line := await self._next(utterances)):
            chunks = tuple(Chunk(*c) for c in line["chunks"])
            out.append(Utterance(line["scheduled"], chunks, condition))
        return out

    async def _next(self, utterances: int) -> dict[str, Any]:
        """The worker's next line, or an error naming the stall: a wedged worker must not hold the run forever."""
        period_s = (self.spec.period_ms or 0) / 1000
        limit = self.stall_timeout + period_s * utterances
        try:
            return await asyncio.wait_for(self._line(), limit)
        except TimeoutError:
            assert self._proc is not None
            where = await self._where()
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            raise UsageError(f"the {self.kind} probe gave nothing for {limit:g} s (killed){where}") from None

    async def _where(self, wait_s: float = 5.0) -> str:
        """Where the worker is: the innermost frame of the stack it writes on SIGUSR1 (none if it wrote nothing
        within ``wait_s``)."""
        assert self._proc is not None and self._stack is not None
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self._proc.returncode is None:
            frames = [line.strip() for line in _read(self._stack).splitlines() if line.strip().startswith("File ")]
            if frames:
                return f"; it was at {frames[0]}"
            await asyncio.sleep(0.1)
        return ""

    async def close(self) -> None:
        if self._proc and self._proc.returncode is None:
            assert self._proc.stdin
            self._proc.stdin.write(b"quit\n")
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        if self._stack:
            with contextlib.suppress(OSError):
                os.unlink(self._stack)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


class HttpAudioProbe:
    """Streams speech from a TTS endpoint, one utterance per request, on an open-loop schedule, in the server's own
    shape (``audio``: chunked PCM/WAV; ``sse``: ``speech.audio.delta`` events; ``websocket``: vLLM-Omni's stream);
    the request body is the OpenAI speech request with ``extra`` fields merged in."""

    kind = "http-audio"

    def __init__(
        self,
        url: str,
        *,
        text: str = "The quick brown fox jumps over the lazy dog. " * 4,
        voice: str = "default",
        model: str = "tts",
        audio_format: str = "wav",
        pcm: AudioFormat | None = None,
        period_s: float = 0.0,
        api_key: str | None = None,
        timeout: float = 60.0,
        shape: str = "audio",
        extra: dict[str, Any] | None = None,
    ) -> None:
        if audio_format not in ("wav", "pcm"):
            raise UsageError(f"--audio-format is wav or pcm, got {audio_format!r}")
        if shape not in SHAPES:
            raise UsageError(f"--tts-shape is one of {', '.join(SHAPES)}, got {shape!r}")
        self.url, self.text, self.voice, self.model = url, text, voice, model
        self.audio_format, self.pcm, self.period_s = audio_format, pcm or AudioFormat(), period_s
        self.shape, self.extra = shape, dict(extra or {})
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> dict[str, Any]:
        return {"probe": self.kind, "url": self.url, "format": self.audio_format, "shape": self.shape,
                "text_chars": len(self.text)}  # fmt: skip

    def body(self) -> dict[str, Any]:
        """The request: OpenAI's speech fields, the shape's streaming fields, then the user's extra fields."""
        body: dict[str, Any] = {"model": self.model, "input": self.text, "voice": self.voice}
        body["response_format"] = "pcm" if self.shape == "websocket" else self.audio_format
        body |= {"stream": True, "stream_format": "sse"} if self.shape == "sse" else {"stream": True}
        if self.shape == "audio":
            body["stream_format"] = "audio"
        return body | self.extra

    async def run(self, utterances: int, condition: str) -> list[Utterance]:
        out: list[Utterance] = []
        start = time.perf_counter()
        if not self.period_s:  # back to back
            return [await self._one(time.perf_counter(), condition) for _ in range(utterances)]
        for _, offset in zip(range(utterances), OpenLoop(1 / self.period_s, poisson=False).offsets(), strict=False):
            due = start + offset
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
            out.append(await self._one(due, condition))
        return out

    async def _one(self, scheduled: float, condition: str) -> Utterance:
        chunks: list[Chunk] = []
        try:
            if self.shape == "websocket":
                error = await read_websocket(websocket_url(self.url), self.body(), chunks, self._headers, self._timeout)
            else:
                error = await self._http(chunks)
        except (httpx.HTTPError, OSError, TimeoutError, WebSocketException) as exc:
            error = f"{type(exc).__name__}: {exc}"
        return Utterance(scheduled, tuple(chunks), condition, error)

    async def _http(self, chunks: list[Chunk]) -> str | None:
        if self._client is None:  # made in the running loop
            self._client = httpx.AsyncClient(timeout=self._timeout, headers=self._headers)
        async with self._client.stream("POST", self.url, json=self.body()) as resp:
            if resp.status_code >= 400:
                detail = (await resp.aread())[:200].decode(errors="replace")
                return f"HTTP {resp.status_code}: {detail}"
            if self.shape == "sse":
                return await _read_sse(resp, SseAudio(self.pcm), chunks)
            await _read_audio(resp, AudioBytes(self.pcm, wav=self.audio_format == "wav"), chunks)
        return None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


async def _read_audio(resp: httpx.Response, audio: AudioBytes, chunks: list[Chunk]) -> None:
    async for data in resp.aiter_raw():
        now = time.perf_counter()
        if seconds := audio.feed(data):
            chunks.append(Chunk(now, seconds))


async def _read_sse(resp: httpx.Response, sse: SseAudio, chunks: list[Chunk]) -> str | None:
    async for data in resp.aiter_raw():
        now = time.perf_counter()
        if seconds := sse.feed(data):
            chunks.append(Chunk(now, seconds))
        if sse.done:
            break
    if sse.error:
        return sse.error
    return None if sse.done else "the SSE stream ended without speech.audio.done"


async def read_websocket(
    url: str, body: dict[str, Any], chunks: list[Chunk], headers: dict[str, str], timeout: float
) -> str | None:
    """One utterance over vLLM-Omni's websocket: config, the text, the flush; PCM frames until session.done."""
    async with connect(url, additional_headers=headers, open_timeout=timeout, max_size=None) as ws:
        await ws.send(json.dumps(websocket_config(body)))
        await ws.send(json.dumps({"type": "input.text", "text": body["input"]}))
        await ws.send(json.dumps({"type": "input.done"}))
        audio = AudioBytes(AudioFormat(), wav=False)
        while True:
            message = await asyncio.wait_for(ws.recv(), timeout)
            now = time.perf_counter()
            if isinstance(message, bytes):
                if seconds := audio.feed(message):
                    chunks.append(Chunk(now, seconds))
                continue
            event = json.loads(message)
            kind = event.get("type")
            if kind == "audio.start":
                audio.fmt = AudioFormat(int(event.get("sample_rate") or audio.fmt.sample_rate))
            elif kind == "error":
                return str(event.get("message") or event)
            elif kind == "session.done":
                await ws.send(json.dumps({"type": "session.close"}))
                return None
