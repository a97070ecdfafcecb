"""GPU catalog: memory as the driver reports it (total) and peak memory bandwidth."""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.core.errors import UsageError
from servelab.core.known_keys import meant

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True, slots=True)
class GPU:
    key: str
    name: str
    memory_bytes: int  # total as nvidia-smi reports it
    bandwidth_gbs: float  # peak, vendor figure
    note: str = ""
    cuda_total_bytes: int | None = None  # what CUDA reports as total (vLLM's base), where measured
    tflops: float = 0.0  # dense BF16 tensor peak, vendor figure (no sparsity): docs/plan-speed.md

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


def _mib(n: int) -> int:
    return n * MIB


GPUS: dict[str, GPU] = {
    g.key: g
    for g in (
        GPU(
            "rtx-pro-6000",
            "RTX PRO 6000 Blackwell (96 GB GDDR7)",
            _mib(97887),
            1792.0,
            "Max-Q and Workstation editions share memory and bandwidth",
            tflops=500.0,
        ),
        GPU("rtx-pro-4000", "RTX PRO 4000 Blackwell (24 GB GDDR7)", _mib(24467), 672.0, tflops=156.0),
        GPU("rtx-4090", "GeForce RTX 4090 (24 GB GDDR6X)", _mib(24564), 1008.0, tflops=165.2),
        GPU("rtx-5090", "GeForce RTX 5090 (32 GB GDDR7)", _mib(32607), 1792.0, tflops=209.5),
        GPU("a100-40gb", "A100 40 GB (HBM2)", _mib(40960), 1555.0, tflops=312.0),
        GPU("a100-80gb", "A100 80 GB (HBM2e)", _mib(81920), 2039.0, tflops=312.0),
        GPU("l40s", "L40S (48 GB GDDR6)", _mib(46068), 864.0, tflops=362.1),
        GPU(
            "h100-80gb",
            "H100 SXM 80 GB (HBM3)",
            _mib(81559),
            3350.0,
            "81,559 MiB as nvidia-smi reads it on the lent H100; CUDA reports 79.18 GiB (vLLM's worker snapshot)",
            _mib(81080),
            tflops=989.4,
        ),
        GPU("h100-pcie", "H100 PCIe 80 GB (HBM2e)", _mib(81559), 2000.0, tflops=756.0),
        GPU(
            "h200",
            "H200 141 GB (HBM3e)",
            _mib(143771),
            4800.0,
            "143,771 MiB as read on the lent H200; CUDA reports 139.80 GiB of it (vLLM's 0.92 = 128.62 GiB)",
            _mib(143159),
            tflops=989.4,
        ),
        GPU("b200", "B200 180 GB (HBM3e)", _mib(183359), 8000.0, tflops=2250.0),
        GPU(
            "gb10",
            "GB10 / DGX Spark (128 GB unified LPDDR5x)",
            _mib(124546),
            273.0,
            "unified memory shared with the CPU: the OS and other processes take their part",
            tflops=125.0,
        ),
    )
}
ALIASES = {
    "h200-141gb": "h200",
    "rtx-pro-6000-96gb": "rtx-pro-6000",
    "dgx-spark": "gb10",
    "h100": "h100-80gb",
    "a100": "a100-80gb",
    "4090": "rtx-4090",
    "5090": "rtx-5090",
    "b200-180gb": "b200",
}


def gpu(key: str) -> GPU:
    k = key.lower()
    found = GPUS.get(ALIASES.get(k, k))
    if found is None:
        raise UsageError(f"unknown GPU {key!r}{meant(k, [*GPUS, *ALIASES])}",
                         hint=f"known: {', '.join(GPUS)}; or give --gpu-mem 96GiB")  # fmt: skip
    return found


def parse_size(text: str) -> int:
    """'96GiB', '80GB', '7 GiB', '512MiB', '3.5g' → bytes. GB is 10^9, GiB (or a bare G) 2^30."""
    t = text.strip().replace(" ", "")
    units = {"gib": GIB, "gb": 10**9, "g": GIB, "mib": MIB, "mb": 10**6, "m": MIB, "tib": 2**40, "tb": 10**12}
    for suffix in sorted(units, key=len, reverse=True):
        if t.lower().endswith(suffix):
            try:
                number = float(t[: -len(suffix)])
            except ValueError:
                break
            if not math.isfinite(number) or number < 0:
                raise UsageError(f"a size is a finite amount of memory, 0 or more, not {text!r}", hint="like 7GiB")
            return int(number * units[suffix])
    raise UsageError(f"cannot read a size from {text!r}", hint="write it like 96GiB, 80GB or 512MiB")


def parse_tokens(text: str) -> int:
    """'64k' → 65536, '128K' → 131072, '32768' → 32768."""
    t = text.strip().lower()
    try:
        count = int(float(t[:-1]) * 1024) if t.endswith("k") else int(t)
    except (ValueError, OverflowError):
        raise UsageError(f"cannot read a token count from {text!r}", hint="like 64k or 32768") from None
    if not 1 <= count <= 1 << 34:
        raise UsageError(f"a token count of {text!r} is not from 1 to {1 << 34:,}", hint="like 64k or 32768")
    return count


def parse_alongside(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, size = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--alongside wants NAME=SIZE (like tts=7GiB), got {item!r}")
        out[name] = parse_size(size)
    return out
