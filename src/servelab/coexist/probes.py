"""Realtime probes behind one interface: each gives utterances (chunk arrival times and the audio each carries)
on the run's clock (``perf_counter``), so the playback model and the statistics need not know which probe ran.

- ``WorkerProbe``: the stand-in decoder of ``worker.py`` in its own process, on a GPU (torch, CUDA graph) or on
  the CPU (numpy), voice or avatar-like frames.
- ``HttpAudioProbe``: any server that streams PCM or WAV audio over HTTP, such as an OpenAI-style
  ``/v1/audio/speech`` with ``stream``; each chunk's duration comes from its bytes and the sample format.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from servelab.coexist.playback import Chunk, Utterance
from servelab.core.errors import UsageError
from servelab.load.arrivals import OpenLoop


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
    """The stand-in decoder in a child process, driven over its stdin and read from its stdout."""

    def __init__(self, spec: WorkerSpec, ready_timeout: float = 300.0) -> None:
        self.spec, self.ready_timeout = spec, ready_timeout
        self.kind = "gpu" if spec.device.startswith("cuda") else "cpu"
        if spec.mode == "frames":
            self.kind += "-frames"
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> dict[str, Any]:
        env = {**os.environ, **self.spec.env}
        self._proc = await asyncio.create_subprocess_exec(
            *self.spec.argv(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, limit=1 << 24
        )
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
        while "done" not in (line := await self._line()):
            chunks = tuple(Chunk(*c) for c in line["chunks"])
            out.append(Utterance(line["scheduled"], chunks, condition))
        return out

    async def close(self) -> None:
        if self._proc and self._proc.returncode is None:
            assert self._proc.stdin
            self._proc.stdin.write(b"quit\n")
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()


@dataclass
class AudioFormat:
    sample_rate: int = 24000
    channels: int = 1
    sample_bytes: int = 2

    @property
    def bytes_per_second(self) -> int:
        return self.sample_rate * self.channels * self.sample_bytes


def parse_wav_header(head: bytes) -> tuple[AudioFormat, int] | None:
    """(format, offset of the sample data) from the start of a WAV stream; None until enough bytes are in.
    A streamed WAV header may carry 0 or 0xFFFFFFFF as sizes: only ``fmt `` and the start of ``data`` count."""
    if len(head) < 12:
        return None
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise UsageError("the audio stream is not WAV (no RIFF/WAVE header); use --audio-format pcm")
    pos, fmt = 12, None
    while pos + 8 <= len(head):
        cid, size = head[pos : pos + 4], struct.unpack("<I", head[pos + 4 : pos + 8])[0]
        if cid == b"fmt ":
            if pos + 24 > len(head):
                return None
            _, channels, rate, _, _, bits = struct.unpack("<HHIIHH", head[pos + 8 : pos + 24])
            fmt = AudioFormat(rate, channels, bits // 8)
        elif cid == b"data":
            return (fmt, pos + 8) if fmt else None
        pos += 8 + size + (size & 1)
    return None


class HttpAudioProbe:
    """Streams speech from an HTTP TTS endpoint, one utterance per request, on an open-loop schedule."""

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
    ) -> None:
        if audio_format not in ("wav", "pcm"):
            raise UsageError(f"--audio-format is wav or pcm, got {audio_format!r}")
        self.url, self.text, self.voice, self.model = url, text, voice, model
        self.audio_format, self.pcm, self.period_s = audio_format, pcm or AudioFormat(), period_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> dict[str, Any]:
        return {"probe": self.kind, "url": self.url, "format": self.audio_format, "text_chars": len(self.text)}

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
        body = {"model": self.model, "input": self.text, "voice": self.voice, "stream": True}
        body["response_format"] = self.audio_format
        chunks: list[Chunk] = []
        if self._client is None:  # made in the running loop
            self._client = httpx.AsyncClient(timeout=self._timeout, headers=self._headers)
        try:
            async with self._client.stream("POST", self.url, json=body) as resp:
                if resp.status_code >= 400:
                    detail = (await resp.aread())[:200].decode(errors="replace")
                    return Utterance(scheduled, (), condition, f"HTTP {resp.status_code}: {detail}")
                await self._read(resp, chunks)
        except httpx.HTTPError as exc:
            return Utterance(scheduled, tuple(chunks), condition, f"{type(exc).__name__}: {exc}")
        return Utterance(scheduled, tuple(chunks), condition)

    async def _read(self, resp: httpx.Response, chunks: list[Chunk]) -> None:
        fmt = self.pcm if self.audio_format == "pcm" else None
        head, carry = b"", 0  # carry: bytes of a sample split across reads
        async for data in resp.aiter_raw():
            now = time.perf_counter()
            if fmt is None:
                head += data
                parsed = parse_wav_header(head)
                if parsed is None:
                    continue
                fmt, offset = parsed
                data = head[offset:]
            frame = fmt.channels * fmt.sample_bytes
            whole = (carry + len(data)) // frame * frame
            carry = carry + len(data) - whole
            if whole:
                chunks.append(Chunk(now, whole / fmt.bytes_per_second))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
