"""The speed model's per-card constants fitted to measured decode speeds (``servelab plan --fit RUN...``).

Each measured point is a step of a stored run: its concurrency c, the mean length its streams held while
decoding (prompt + half the output) and the median per-stream tok/s, whose inverse is the step time. The fit
finds the bandwidth efficiency, FLOP efficiency and fixed step cost (plan/speed.py) that minimise the squared
relative error of the predicted step times: a grid over both efficiencies, the step cost solved in closed form
for each pair, then finer grids around the best. Every third point (by concurrency, then length) is held out
of the fit and its residual reported apart, so the constants are judged on points they never saw. An
efficiency no point is bound by is not determined by the points and is said to be.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from servelab.core.errors import UsageError
from servelab.plan.speed import Constants, Workload

HOLD_OUT_EVERY = 3  # every third point (index 2, 5, ...) is held out, once there are four or more
COARSE = np.geomspace(0.01, 1.0, 120)  # steps of 4%
ZOOM = (1.05, 1.005, 1.0005)  # each finer grid spans the last one's step around its best


@dataclass(frozen=True, slots=True)
class Measured:
    concurrency: int
    length: int  # mean tokens a stream held while decoding
    tok_s: float  # median per-stream decode tok/s
    source: str = ""  # run and step


@dataclass(frozen=True, slots=True)
class FitRow:
    point: Measured
    predicted_tok_s: float
    residual: float  # predicted / measured - 1
    held_out: bool
    bound: str


@dataclass(frozen=True, slots=True)
class Fit:
    constants: Constants
    rows: list[FitRow]
    rms_fit: float  # root mean square of the fitted points' residuals
    rms_held_out: float | None  # None: too few points to hold any out
    undetermined: list[str]  # efficiencies no fitted point was bound by
    hold_out: list[int] | None = None  # the concurrencies held out as asked; None: every third point

    @property
    def held_out(self) -> list[FitRow]:
        return [r for r in self.rows if r.held_out]


def split(points: list[Measured], hold_out: frozenset[int] | None = None) -> tuple[list[Measured], list[Measured]]:
    """(fitted, held out): the points at the ``hold_out`` concurrencies where given, else every third point by
    (concurrency, length) held out, from four points on."""
    ordered = sorted(points, key=lambda p: (p.concurrency, p.length, p.tok_s))
    if hold_out is not None:
        return [p for p in ordered if p.concurrency not in hold_out], [p for p in ordered if p.concurrency in hold_out]
    if len(ordered) < 4:
        return ordered, []
    out = [i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1 for i in range(len(ordered))]
    return [p for p, o in zip(ordered, out, strict=True) if not o], [p for p, o in zip(ordered, out, strict=True) if o]


def _terms(work: Workload, base: Constants, points: list[Measured]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds at full bandwidth, seconds at full compute, measured step seconds) per point."""
    steps = [work.decode_step(p.concurrency, p.length) for p in points]
    memory = np.array([b / (base.bandwidth_gbs * 1e9) for b, _ in steps])
    compute = np.array([f / (base.tflops * 1e12) for _, f in steps])
    return memory, compute, np.array([1.0 / p.tok_s for p in points])


def _best(memory: np.ndarray, compute: np.ndarray, y: np.ndarray, bw: np.ndarray,
          fl: np.ndarray) -> tuple[float, float, float, float]:  # fmt: skip
    """(e_bw, e_flop, step cost, loss) minimising the squared relative error over the grid bw x fl."""
    core = np.maximum(memory[None, None, :] / bw[:, None, None], compute[None, None, :] / fl[None, :, None])
    weight = 1.0 / y**2
    t0 = np.clip(((y - core) * weight).sum(-1) / weight.sum(), 0.0, None)
    loss = (((t0[..., None] + core - y) / y) ** 2).sum(-1)
    i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return float(bw[i]), float(fl[j]), float(t0[i, j]), float(loss[i, j])


def fit_constants(
    work: Workload, base: Constants, points: list[Measured], hold_out: frozenset[int] | None = None
) -> Fit:
    """The constants that best predict ``points`` (the held-out ones apart), with every residual."""
    if any(p.tok_s <= 0 or p.concurrency < 1 or p.length < 0 for p in points):
        raise UsageError("a measured point has no speed, concurrency or length: it cannot be fitted")
    fitted, held = split(points, hold_out)
    if hold_out is not None and (missing := sorted(hold_out - {p.concurrency for p in points})):
        raise UsageError(f"--hold-out {', '.join(map(str, missing))}: no measured step at that concurrency",
                         hint=f"measured: {', '.join(map(str, sorted({p.concurrency for p in points})))}")  # fmt: skip
    if len(fitted) < 3:
        raise UsageError(f"{len(fitted)} measured points left to fit: the fit needs at least 3 (steps at several "
                         "concurrencies besides the held-out ones)")  # fmt: skip
    memory, compute, y = _terms(work, base, fitted)
    bw, fl, t0, _ = _best(memory, compute, y, COARSE, COARSE)
    for span in ZOOM:  # finer grids around the best, each within the last one's step
        fine_bw, fine_fl = (np.clip(np.geomspace(v / span, v * span, 41), 1e-4, 1.5) for v in (bw, fl))
        bw, fl, t0, _ = _best(memory, compute, y, fine_bw, fine_fl)
    consts = replace(base, bandwidth_efficiency=bw, flop_efficiency=fl, step_overhead_s=t0,
                     source=f"fitted to {len(fitted)} measured points ({len(held)} held out)")  # fmt: skip
    undetermined = _undetermined(memory, compute, y, bw, fl)
    if "FLOP efficiency" in undetermined:  # only a floor: no fitted point was compute-bound
        consts = replace(consts, flop_efficiency=max(fl, base.flop_efficiency))
    if "bandwidth efficiency" in undetermined:
        consts = replace(consts, bandwidth_efficiency=max(bw, base.bandwidth_efficiency))
    rows = [_row(work, consts, p, False) for p in fitted] + [_row(work, consts, p, True) for p in held]
    rows.sort(key=lambda r: (r.point.concurrency, r.point.length))
    return Fit(consts, rows, _rms([r for r in rows if not r.held_out]), _rms([r for r in rows if r.held_out]) if
               held else None, undetermined, None if hold_out is None else sorted(hold_out))  # fmt: skip


def _undetermined(memory: np.ndarray, compute: np.ndarray, y: np.ndarray, bw: float, fl: float) -> list[str]:
    """The efficiencies the points do not pin down: taking that bound away (an efficiency so high it never binds)
    fits them as well, so the fitted value is only a floor."""
    _, _, _, loss = _best(memory, compute, y, np.array([bw]), np.array([fl]))
    found = []
    for name, grid_bw, grid_fl in (("bandwidth efficiency", [1e9], [fl]), ("FLOP efficiency", [bw], [1e9])):
        _, _, _, unbound = _best(memory, compute, y, np.array(grid_bw), np.array(grid_fl))
        if unbound <= loss * (1 + 1e-3) + 1e-12:
            found.append(name)
    return found


def _row(work: Workload, consts: Constants, point: Measured, held_out: bool) -> FitRow:
    seconds, bound = consts.step_s(*work.decode_step(point.concurrency, point.length))
    predicted = 1.0 / seconds
    return FitRow(point, predicted, predicted / point.tok_s - 1, held_out, bound)


def _rms(rows: list[FitRow]) -> float:
    return float(np.sqrt(np.mean([r.residual**2 for r in rows]))) if rows else 0.0
