"""Eval statistics: k/n with Wilson intervals, pass@k and pass^k over repeats, per-item flip rate, and a paired
McNemar test between two targets (a difference inside the noise is called inconclusive)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

from servelab.core.stats import mcnemar_exact, wilson_interval
from servelab.eval.grade import Outcome

ALPHA = 0.05


@dataclass(frozen=True)
class Graded:
    """One graded reply: which item, which repeat, what outcome."""

    target: str
    item: str
    repeat: int
    outcome: Outcome
    category: str = ""

    @property
    def strict(self) -> bool:
        return self.outcome is Outcome.CORRECT

    @property
    def semantic(self) -> bool:
        return self.outcome in (Outcome.CORRECT, Outcome.FORMAT_VIOLATION)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k samples (drawn from n, c of them right) is right (unbiased estimator)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all k samples drawn from n (c right) are right: reliability, not luck."""
    return comb(c, k) / comb(n, k) if k <= n else 0.0


def accuracy(graded: Sequence[Graded]) -> dict[str, Any]:
    """Outcome counts, strict and semantic accuracy with 95% Wilson intervals."""
    n = len(graded)
    counts = Counter(g.outcome.value for g in graded)
    out: dict[str, Any] = {"n": n, "outcomes": {o.value: counts.get(o.value, 0) for o in Outcome}}
    for channel in ("strict", "semantic"):
        k = sum(getattr(g, channel) for g in graded)
        iv = wilson_interval(k, n) if n else None
        out[channel] = {"k": k, "n": n, "rate": k / n if n else None, "low": iv.low if iv else None,
                        "high": iv.high if iv else None}  # fmt: skip
    return out


def repeats(graded: Sequence[Graded], k: int) -> dict[str, Any]:
    """Over items answered ``k`` or more times: mean pass@k, pass^k (strict) and the share of items whose
    outcome was not the same every time."""
    by_item: dict[str, list[Graded]] = defaultdict(list)
    for g in graded:
        by_item[g.item].append(g)
    items = [runs for runs in by_item.values() if len(runs) >= k]
    if not items or k < 1:
        return {"k": k, "items": 0, "pass_at_k": None, "pass_hat_k": None, "flip_rate": None}
    at = [pass_at_k(len(r), sum(g.strict for g in r), k) for r in items]
    hat = [pass_hat_k(len(r), sum(g.strict for g in r), k) for r in items]
    flips = sum(len({g.outcome for g in r}) > 1 for r in items)
    return {
        "k": k,
        "items": len(items),
        "pass_at_k": sum(at) / len(items),
        "pass_hat_k": sum(hat) / len(items),
        "flip_rate": flips / len(items),
    }


def paired(a: Sequence[Graded], b: Sequence[Graded], channel: str = "strict") -> dict[str, Any]:
    """McNemar's exact test on the items both targets answered (first repeat of each)."""
    first_a = {g.item: getattr(g, channel) for g in a if g.repeat == 0}
    first_b = {g.item: getattr(g, channel) for g in b if g.repeat == 0}
    both = sorted(first_a.keys() & first_b.keys())
    only_a = sum(first_a[i] and not first_b[i] for i in both)
    only_b = sum(first_b[i] and not first_a[i] for i in both)
    p = mcnemar_exact(only_a, only_b)
    verdict = "inconclusive" if p >= ALPHA else "first better" if only_a > only_b else "second better"
    return {"channel": channel, "items": len(both), "only_first": only_a, "only_second": only_b, "p": p,
            "verdict": verdict}  # fmt: skip
