"""pass@k, pass^k, flip rate, Wilson accuracy and the paired McNemar verdict on known outcome tables."""

from __future__ import annotations

import pytest

from servelab.eval.grade import Outcome
from servelab.eval.stats import Graded, accuracy, paired, pass_at_k, pass_hat_k, repeats

C, F, W = Outcome.CORRECT, Outcome.FORMAT_VIOLATION, Outcome.WRONG


def test_pass_at_k_and_pass_hat_k() -> None:
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    assert pass_hat_k(3, 3, 3) == 1.0 and pass_hat_k(3, 2, 3) == 0.0


def test_accuracy_keeps_strict_and_semantic_apart() -> None:
    graded = [Graded("t", f"i{n}", 0, o) for n, o in enumerate([C] * 20 + [F] * 4 + [W] * 4)]
    acc = accuracy(graded)
    assert acc["outcomes"]["format_violation"] == 4 and acc["outcomes"]["wrong"] == 4
    assert (acc["strict"]["k"], acc["semantic"]["k"], acc["strict"]["n"]) == (20, 24, 28)
    assert acc["strict"]["low"] < 20 / 28 < acc["strict"]["high"]


def test_repeats_flip_rate() -> None:
    graded = [Graded("t", "a", r, C) for r in range(3)] + [Graded("t", "b", r, o) for r, o in enumerate([C, W, C])]
    rep = repeats(graded, 3)
    assert rep["items"] == 2 and rep["flip_rate"] == 0.5
    assert rep["pass_at_k"] == 1.0 and rep["pass_hat_k"] == 0.5


def test_paired_mcnemar_calls_small_differences_inconclusive() -> None:
    a = [Graded("a", f"i{n}", 0, C) for n in range(30)]
    b = [Graded("b", f"i{n}", 0, W if n < 2 else C) for n in range(30)]
    assert paired(a, b)["verdict"] == "inconclusive"  # 2 discordant pairs are noise
    b = [Graded("b", f"i{n}", 0, W if n < 12 else C) for n in range(30)]
    got = paired(a, b)
    assert (got["only_first"], got["only_second"], got["verdict"]) == (12, 0, "first better")
    assert got["p"] < 0.001
