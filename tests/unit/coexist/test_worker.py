"""The stand-in decoder process on the CPU (numpy): voice chunks and avatar-like frames arrive as the protocol
says, and the figures that only frames have (latency against the frame's due time, lowest fps) come out."""

import asyncio
import itertools

from servelab.coexist.probes import WorkerProbe, WorkerSpec
from servelab.coexist.summary import figures


def run(spec: WorkerSpec, utterances: int) -> tuple[dict[str, object], list]:  # type: ignore[type-arg]
    probe = WorkerProbe(spec, ready_timeout=60)

    async def go() -> tuple[dict[str, object], list]:  # type: ignore[type-arg]
        info = await probe.start()
        try:
            return info, await probe.run(utterances, "alone")
        finally:
            await probe.close()

    return asyncio.run(go())


def test_voice_chunks_on_an_open_loop_schedule() -> None:
    info, got = run(WorkerSpec("cpu", "voice", dim=64, layers=2, ffn=128, chunks=10, period_ms=100), 3)
    assert info["probe"] == "cpu" and info["backend"] == "numpy"
    assert [len(u.chunks) for u in got] == [10, 10, 10]
    assert [round(b.scheduled_s - a.scheduled_s, 6) for a, b in itertools.pairwise(got)] == [0.1, 0.1]
    for u in got:
        arrivals = [c.arrived_s for c in u.chunks]
        assert arrivals == sorted(arrivals) and arrivals[0] >= u.scheduled_s
        assert all(c.audio_s == 0.04 for c in u.chunks)


def test_frames_carry_their_due_time() -> None:
    info, got = run(WorkerSpec("cpu", "frames", dim=64, layers=2, ffn=128, fps=20), 2)
    assert info["probe"] == "cpu-frames"
    assert [len(u.chunks) for u in got] == [20, 20]
    for u in got:
        dues = [c.due_s for c in u.chunks]
        assert dues[0] == u.scheduled_s and all(abs(b - a - 0.05) < 1e-9 for a, b in itertools.pairwise(dues))  # type: ignore[operator]
        assert all(c.arrived_s >= c.due_s for c in u.chunks)  # type: ignore[operator]
    figs = figures("alone", got, [0.0])
    assert figs.frame_latency_p99_ms is not None and figs.frame_latency_p99_ms >= 0
    assert figs.min_fps is not None and 15 < figs.min_fps <= 21  # a frame every 50 ms over the second
