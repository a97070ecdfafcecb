"""A llama.cpp plan in llama.cpp's own terms: llama-server has no memory fraction to set; it allocates its buffers
whole at start (the model buffer, the KV buffer for ``-c`` cells split over ``-np`` slots, the compute buffer), with
``-ngl`` layers on the GPU. The verdict is whether those buffers fit beside the co-tenants, in bytes, and how many
slots of the context the memory left would hold."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.plan.engines import Capacity
from servelab.plan.quant import GIB

NGL_ALL = 999  # -ngl: every layer on the GPU (what the plan assumes)


@dataclass(frozen=True, slots=True)
class Buffers:
    """What llama-server allocates for ``-np`` slots of the context, and the memory it may take."""

    model: int  # weights on the GPU (-ngl 999)
    kv: int  # the KV buffer of -c = context x slots cells
    compute: int
    room: int  # the GPU less the co-tenants and the headroom

    @property
    def used(self) -> int:
        return self.model + self.kv + self.compute

    @property
    def fits(self) -> bool:
        return self.used <= self.room


def slots_that_fit(buffers: Buffers, per_slot: int) -> float:
    """Slots of the context the memory left by the model and compute buffers would hold."""
    left = buffers.room - buffers.model - buffers.compute
    return max(0.0, left / per_slot) if per_slot else 0.0


def flags(context: int, slots: int) -> str:
    return f"-c {context * slots} -np {slots} -ngl {NGL_ALL}"


def verdict(buffers: Buffers, capacity: Capacity, context: int, slots: int, gpu: str) -> str:
    """``fits: -c 32768 -np 1 -ngl 999 takes 19.14 GiB of the 23.99 GiB free on rtx-4090 (2.2 slots of 32K fit)``."""
    ctx = f"{context // 1024}K" if context % 1024 == 0 else f"{context:,}"
    head = "fits" if buffers.fits else f"does not fit {slots} slot{'s' if slots != 1 else ''} of {ctx}"
    most = _tenths(slots_that_fit(buffers, capacity.bytes_per_sequence))
    return (
        f"{head}: {flags(context, slots)} {'takes' if buffers.fits else 'needs'} {buffers.used / GIB:.2f} GiB of the "
        f"{buffers.room / GIB:.2f} GiB "
        f"free on {gpu} ({most:g} slot{'s' if most != 1 else ''} of {ctx} fit)"
    )


def reasons(buffers: Buffers, context: int, slots: int) -> list[str]:
    """Why the buffers do not fit, in llama.cpp's buffers; empty when they do."""
    if buffers.fits:
        return []
    return [
        f"model buffer {buffers.model / GIB:.2f} GiB + KV buffer {buffers.kv / GIB:.2f} GiB (-c {context * slots:,}) "
        f"+ compute buffer {buffers.compute / GIB:.2f} GiB = {buffers.used / GIB:.2f} GiB, more than the "
        f"{buffers.room / GIB:.2f} GiB the GPU leaves beside the co-tenants and headroom"
    ]


def _tenths(value: float) -> float:
    return int(value * 10 + 1e-9) / 10
