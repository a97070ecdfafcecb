"""GPU telemetry through NVML on the run clock: with no NVML library or no GPU it records nothing and says so once
a process; the sampler's own logic (what it reads, when, energy and joules per output token) is tested against a
fake NVML module injected here: a fixture standing in for pynvml because no GPU is on this machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from servelab.core.store import RunStore
from servelab.engines import gpu_telemetry
from servelab.engines.gpu_telemetry import GpuSampler, say_once


class FakeNvml:
    """A fixture standing in for pynvml (no GPU is on this machine): two GPUs whose counters move with a clock the
    test turns, the second without an energy counter (as cards before Volta)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, clock: list[int], devices: int = 2) -> None:
        self.clock, self.devices, self.shut = clock, devices, 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return f"Fake GPU {h}".encode()

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=50 + h, memory=20 + h)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=(h + 1) * 2**30 + self.clock[0])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 300_000 if h == 0 else 100_000  # milliwatts

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetProcessUtilization(self, h: int, last_seen_us: int) -> list[Any]:
        """Two processes on GPU 0, one sample each per clock second, newer than ``last_seen_us`` only (as NVML
        returns them); GPU 1 has none (NVML raises NotFound)."""
        if h == 1:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        now_us = self.clock[0] // 1000
        samples = [SimpleNamespace(pid=pid, smUtil=sm, memUtil=sm // 2, timeStamp=t)
                   for t in range(0, now_us + 1, 10**6) for pid, sm in ((4242, 60), (777, 20))]  # fmt: skip
        return [s for s in samples if s.timeStamp > last_seen_us]

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        if pid == 777:
            raise RuntimeError("NVML_ERROR_NO_PERMISSION")
        return b"/usr/bin/python3.12"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if h == 1:
            raise RuntimeError("not supported")
        return 1_000_000 + self.clock[0] // 10**6 * 250  # mJ: 250 J a second


def test_no_nvml_records_nothing_and_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(gpu_telemetry, "load_nvml", missing)
    monkeypatch.setattr(gpu_telemetry, "_SAID", set())
    first, second = GpuSampler(), GpuSampler()
    said = first.start()
    assert said is not None and "nvidia-ml-py is not installed" in said
    assert second.start() is None  # the same reason is not said again in this process
    assert first.stop().samples == [] and second.stop().none_because == said
    assert first.telemetry.summary(100)["joules_per_output_token"] is None


def test_nvml_with_no_gpu_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(gpu_telemetry, "_SAID", set())  # whatever an earlier test of this process said
    assert "NVML found no GPU" in str(GpuSampler(nvml=NoDriver([0])).start())
    assert GpuSampler(nvml=NoDriver([0])).start() is None  # said once a process
    empty = GpuSampler(nvml=FakeNvml([0], devices=0))
    empty.start()
    assert empty.stop().none_because == "GPU telemetry: none recorded: NVML sees no GPU"


def test_the_sampler_reads_every_gpu_on_the_run_clock_with_energy_per_token() -> None:
    clock = [0]
    nvml = FakeNvml(clock)
    sampler = GpuSampler(interval_s=3600, nvml=nvml, clock=lambda: clock[0])  # the thread never ticks: the test does
    assert sampler.start() is None
    for _ in range(4):
        clock[0] += 2 * 10**9  # two seconds a sample
        sampler._sample_all()
    telemetry = sampler.stop()  # one last sample at 8 s... plus the stop's own, at the same time
    assert nvml.shut == 1 and telemetry.gpus == ["Fake GPU 0", "Fake GPU 1"]
    assert [s.t_s for s in telemetry.samples if s.gpu == 0] == [0.0, 2.0, 4.0, 6.0, 8.0, 8.0]
    summary = telemetry.summary(output_tokens=1000)
    assert summary["gpus"]["0"]["energy_j"] == pytest.approx(8 * 250)  # the counter's difference
    assert summary["gpus"]["1"]["energy_j"] == pytest.approx(8 * 100)  # no counter: 100 W integrated over 8 s
    assert summary["joules_per_output_token"] == pytest.approx((2000 + 800) / 1000)
    assert summary["gpus"]["1"]["sm_util_mean"] == 51 and summary["gpus"]["0"]["power_w_mean"] == 300
    stored = telemetry.stored(1000)
    assert len(stored["samples"]) == 12 and stored["samples"][0]["mem_clock_mhz"] == 2619


def test_a_bench_run_keeps_what_telemetry_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's hook: a run stores its GPU summary, here the reason nothing was recorded (no GPU)."""
    from servelab.bench.run import BenchSession
    from servelab.load import Target

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails, as on a machine without it
    monkeypatch.setattr(gpu_telemetry, "_SAID", set())
    with RunStore(tmp_path / "runs.sqlite") as store:
        session = BenchSession(store, "bench", [Target("t", "http://127.0.0.1:9/v1", "m")], {}, {})
        with session.running():
            pass
        kept = store.summaries(session.run_id)["bench/gpu"]
    assert kept["samples"] == [] and "not installed" in kept["none_because"]
    assert any("GPU telemetry" in w for w in session.result.warnings)


def test_say_once() -> None:
    assert say_once("a unique reason for this test") == "a unique reason for this test"
    assert say_once("a unique reason for this test") is None


@pytest.mark.parametrize("sim", [["--max-running", "4", "--step-ms", "4"]], indirect=True)
def test_the_report_shows_a_bench_and_each_sweep_points_gpu_figures(
    sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bench run against a real server, its NVML read from the fake module (no GPU here): the bench's section has
    a GPU table with what the cards said, and a sweep whose point is that run shows it beside the point's flags."""
    from servelab.cli import main
    from servelab.core.recorder import RunRecorder
    from servelab.core.results.sweep import SweepPoint, SweepRun
    from servelab.core.store import STATUS_COMPLETE
    from servelab.report import section

    monkeypatch.setattr(gpu_telemetry, "load_nvml", lambda: FakeNvml([0]))
    store = tmp_path / "runs.sqlite"
    assert main(["bench", "--target", f"point-0={sim.url}", "--scenario", "synthetic:64:24", "--requests", "4",
                 "--store", str(store), "--json"]) == 0  # fmt: skip
    bench_id = json.loads(capsys.readouterr().out)["run_id"]
    with RunStore(store) as db:
        table = next(
            t for t in section(db, db.get_run(bench_id), with_plots=False).tables if t.caption == "GPU telemetry"
        )
        assert [row[0] for row in table.rows] == ["0: Fake GPU 0", "1: Fake GPU 1"]
        assert table.rows[0][2] == "50%" and table.rows[1][2] == "51%"  # SM busy, as the cards said
        assert table.rows[0][5] == "300 W" and table.rows[1][5] == "100 W"
        assert table.rows[1][4] == "2.00 GiB"  # memory used, the most sampled
        sweep = RunRecorder(db, "sweep", {"kind": "sweep"})
        point = SweepPoint(index=0, key="-np 4", status="measured", bench_run=bench_id)
        sweep.result(SweepRun(engine="llamacpp", planned=[point.key], points=[point]))
        sweep.finish(STATUS_COMPLETE)
        out = section(db, db.get_run(sweep.run_id), with_plots=False)
    per_point = next(t for t in out.tables if t.caption == "GPU per point")
    assert per_point.rows[0][:2] == ["0", "-np 4"]
    assert "gpu 0: 300 W, 1.00 GiB used, SM 50%" in per_point.rows[0][2]


def test_each_gpu_process_is_sampled_once_with_its_name() -> None:
    """Per-process samples newer than the last read only (none counted twice), named where NVML may say."""
    clock = [0]
    sampler = GpuSampler(interval_s=3600, nvml=FakeNvml(clock), clock=lambda: clock[0], wall=lambda: clock[0] / 1e9)
    assert sampler.start() is None
    for _ in range(3):
        clock[0] += 2 * 10**9
        sampler._sample_all()
    telemetry = sampler.stop()
    seen = [(p.pid, p.sm_util) for p in telemetry.processes]
    # NVML's samples at 0..6 s: those after the run's start, each read once, at the time NVML took it
    assert sorted(seen) == sorted([(4242, 60.0)] * 6 + [(777, 20.0)] * 6)
    assert sorted({p.t_s for p in telemetry.processes}) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert telemetry.process_names == {4242: "/usr/bin/python3.12", 777: "?"}
    assert all(p.gpu == 0 for p in telemetry.processes)


def test_each_coexist_condition_gets_the_gpu_samples_inside_its_segments() -> None:
    """Segments on the sampler's clock become windows; a condition's figures are the samples inside them."""
    from servelab.coexist.gpu_share import condition_gpu, gpu_summary
    from servelab.engines.gpu_telemetry import GpuSample, GpuTelemetry, ProcessSample

    def sample(t: float, sm: float, power: float) -> GpuSample:
        return GpuSample(t, 0, sm, 10.0, int(t * 2**30), power, 1980, 2619, None)

    telemetry = GpuTelemetry(t0_ns=100 * 10**9, interval_s=0.5, gpus=["H100"])
    telemetry.samples = [sample(t, sm, p) for t, sm, p in ((1, 10, 100), (2, 20, 120), (5, 90, 300), (6, 70, 280))]
    telemetry.processes = [ProcessSample(2, 0, 11, 15.0, 1.0), ProcessSample(5, 0, 11, 30.0, 1.0),
                           ProcessSample(5, 0, 22, 60.0, 1.0), ProcessSample(6, 0, 22, 50.0, 1.0)]  # fmt: skip
    telemetry.process_names = {11: "/opt/tts/bin/python", 22: "vllm"}
    stored = gpu_summary(telemetry, [("alone", 100.5, 102.5), ("llm:decode", 104.5, 106.5), ("empty", 107, 108)])
    found = condition_gpu(json.loads(json.dumps(stored)))  # as the store gives it back
    assert list(found) == ["alone", "llm:decode"]  # no sample inside "empty": no figures
    alone, loaded = found["alone"], found["llm:decode"]
    assert (alone["samples"], alone["sm_busy"], alone["power_w"]) == (2, {0: 15.0}, 110.0)
    assert loaded["sm_busy"] == {0: 80.0} and loaded["mem_used_max_bytes"] == 6 * 2**30
    assert [(p["pid"], p["sm_share"]) for p in loaded["processes"]] == [(22, 55.0), (11, 30.0)]
    assert alone["processes"] == [{"pid": 11, "name": "/opt/tts/bin/python", "sm_share": 15.0, "samples": 1}]
