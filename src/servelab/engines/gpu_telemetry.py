"""GPU telemetry on the run clock, through NVML (``nvidia-ml-py``), wherever a GPU is visible.

A sampler thread reads every visible GPU every ``interval_s``: SM and memory utilisation, memory used, power,
SM and memory clocks and the energy counter, each sample stamped with ``time.perf_counter_ns()`` (the clock the
request records use) and kept as seconds from the run's start. With no NVML library or no GPU it records
nothing and says why, once a process. Energy is the counter's difference over the run where the card has one,
else power integrated over the samples; per output token it is that over the run's output tokens.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

_SAID: set[str] = set()  # reasons already said in this process


def say_once(reason: str) -> str | None:
    """``reason`` the first time it is given in this process, else None (a run of many steps says it once)."""
    if reason in _SAID:
        return None
    _SAID.add(reason)
    return reason


@dataclass(frozen=True, slots=True)
class GpuSample:
    t_s: float  # seconds from the run's start, on the perf_counter clock
    gpu: int
    sm_util: float  # percent of the window a kernel ran
    mem_util: float  # percent of the window memory was read or written
    mem_used_bytes: int
    power_w: float
    sm_clock_mhz: int
    mem_clock_mhz: int
    energy_j: float | None  # the card's counter since the driver loaded, where it has one


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """NVML's per-process utilisation (``nvmlDeviceGetProcessUtilization``): a process's share of one GPU's SM and
    memory time over NVML's own sample period, taken at run-clock ``t_s``."""

    t_s: float
    gpu: int
    pid: int
    sm_util: float
    mem_util: float


@dataclass(slots=True)
class GpuTelemetry:
    t0_ns: int
    interval_s: float
    gpus: list[str] = field(default_factory=list)  # names, by index
    samples: list[GpuSample] = field(default_factory=list)
    none_because: str | None = None  # why nothing was recorded
    processes: list[ProcessSample] = field(default_factory=list)  # where the driver gives per-process samples
    process_names: dict[int, str] = field(default_factory=dict)  # pid -> its executable, as NVML names it

    def energy_j(self, gpu: int) -> float | None:
        """Energy one GPU used over the samples: its counter's difference, else power integrated (trapezoids)."""
        mine = [s for s in self.samples if s.gpu == gpu]
        if len(mine) < 2:
            return None
        first, last = mine[0].energy_j, mine[-1].energy_j
        if first is not None and last is not None:
            return last - first
        return sum((b.t_s - a.t_s) * (a.power_w + b.power_w) / 2 for a, b in itertools.pairwise(mine))

    def summary(self, output_tokens: int = 0) -> dict[str, Any]:
        """Per GPU: samples, mean SM and memory utilisation, peak memory used, mean power, energy and, given the
        run's output tokens, joules per output token (all GPUs together)."""
        per_gpu: dict[str, Any] = {}
        total = 0.0
        for index, name in enumerate(self.gpus):
            mine = [s for s in self.samples if s.gpu == index]
            if not mine:
                continue
            energy = self.energy_j(index)
            total += energy or 0.0
            per_gpu[str(index)] = {
                "name": name, "samples": len(mine), "sm_util_mean": _mean([s.sm_util for s in mine]),
                "mem_util_mean": _mean([s.mem_util for s in mine]),
                "mem_used_max_bytes": max(s.mem_used_bytes for s in mine),
                "power_w_mean": _mean([s.power_w for s in mine]), "energy_j": energy,
            }  # fmt: skip
        per_token = total / output_tokens if output_tokens and total else None
        return {"gpus": per_gpu, "energy_j": total or None, "joules_per_output_token": per_token,
                "none_because": self.none_because}  # fmt: skip

    def stored(self, output_tokens: int = 0) -> dict[str, Any]:
        """What a run keeps: the summary, then every sample (as lists, on the run clock)."""
        names = {str(pid): name for pid, name in self.process_names.items()}
        return self.summary(output_tokens) | {
            "t0_ns": self.t0_ns, "interval_s": self.interval_s, "samples": [asdict(s) for s in self.samples],
            "processes": [asdict(p) for p in self.processes], "process_names": names,
        }  # fmt: skip


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def load_nvml() -> Any:
    """The ``pynvml`` module of nvidia-ml-py (ImportError when it is not installed)."""
    import pynvml

    return pynvml


class GpuSampler:
    """Samples every visible GPU on a thread until stopped; ``nvml`` is the NVML module (pynvml or a stand-in)."""

    def __init__(self, interval_s: float = 0.5, nvml: Any = None, clock: Callable[[], int] = time.perf_counter_ns,
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.interval_s, self.clock, self.wall, self._nvml = interval_s, clock, wall, nvml
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[Any] = []
        self._seen_us: dict[int, int] = {}  # per GPU: the newest per-process sample's timestamp taken
        self._epoch_s = 0.0  # the wall clock at the run clock's zero (NVML stamps per-process samples in wall time)
        self.telemetry = GpuTelemetry(t0_ns=clock(), interval_s=interval_s)

    def start(self) -> str | None:
        """Start sampling; None when it runs, else why nothing will be recorded (said once a process)."""
        reason = self._open()
        if reason is not None:
            self.telemetry.none_because = reason
            return say_once(reason)
        self.telemetry.t0_ns = self.clock()
        self._epoch_s = self.wall()
        self._seen_us = {i: int(self._epoch_s * 1e6) for i in range(len(self._handles))}  # none from before the run
        self._sample_all()
        self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
        self._thread.start()
        return None

    def stop(self) -> GpuTelemetry:
        """Stop, with one last sample, and release NVML."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5 * self.interval_s + 1)
            self._sample_all()
            self._thread = None
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        return self.telemetry

    def _open(self) -> str | None:
        try:
            nvml = self._nvml if self._nvml is not None else load_nvml()
        except ImportError:
            return "GPU telemetry: none recorded: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        self._nvml = nvml
        try:
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            return f"GPU telemetry: none recorded: NVML found no GPU ({exc})"
        if count == 0:
            nvml.nvmlShutdown()
            return "GPU telemetry: none recorded: NVML sees no GPU"
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.telemetry.gpus = [_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        return None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_all()

    def _sample_all(self) -> None:
        now = (self.clock() - self.telemetry.t0_ns) / 1e9
        for index, handle in enumerate(self._handles):
            try:
                self.telemetry.samples.append(self._sample(index, handle, now))
            except Exception:
                continue
            with contextlib.suppress(Exception):  # a driver without per-process accounting gives none
                self._processes(index, handle, now)

    def _processes(self, index: int, handle: Any, now: float) -> None:
        """The per-process samples NVML took since the last ones read from this GPU, with each new pid's name."""
        found = self._nvml.nvmlDeviceGetProcessUtilization(handle, self._seen_us.get(index, 0))
        for s in found:
            pid, stamp = int(s.pid), int(s.timeStamp)
            self._seen_us[index] = max(self._seen_us.get(index, 0), stamp)
            t_s = min(now, stamp / 1e6 - self._epoch_s)  # when NVML took it, on the run clock
            self.telemetry.processes.append(ProcessSample(t_s, index, pid, float(s.smUtil), float(s.memUtil)))
            if pid not in self.telemetry.process_names:
                try:
                    self.telemetry.process_names[pid] = _text(self._nvml.nvmlSystemGetProcessName(pid))
                except Exception:
                    self.telemetry.process_names[pid] = "?"

    def _sample(self, index: int, handle: Any, now: float) -> GpuSample:
        nvml = self._nvml
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            energy: float | None = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3  # mJ -> J
        except Exception:
            energy = None
        return GpuSample(
            t_s=now, gpu=index, sm_util=float(util.gpu), mem_util=float(util.memory),
            mem_used_bytes=int(memory.used), power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
            sm_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            mem_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)), energy_j=energy,
        )  # fmt: skip


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
