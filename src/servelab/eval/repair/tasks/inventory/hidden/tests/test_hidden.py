import random
from decimal import Decimal

from inventory import Inventory
from servelab_grading import reference, seed


def test_lookup_ignores_case_and_whitespace() -> None:
    inv = Inventory()
    inv.load([(" ab-1", 10, "2.50")])
    assert inv.available("AB-1 ") == 10
    assert inv.available("ab-1") == 10


def test_rows_with_the_same_sku_are_merged() -> None:
    inv = Inventory()
    inv.load([("ab-1", 5, "2.50"), ("AB-1 ", 3, "2.50"), ("CD-2", 1, "1.00")])
    assert inv.available("AB-1") == 8
    assert sorted(inv.stock) == ["AB-1", "CD-2"]


def test_reservation_is_all_or_nothing() -> None:
    inv = Inventory()
    inv.load([("AB-1", 5, "1.00"), ("CD-2", 1, "1.00")])
    assert not inv.reserve({"AB-1": 2, "CD-2": 2})
    assert inv.available("AB-1") == 5
    assert inv.available("CD-2") == 1


def test_top_sellers_ties_in_sku_order() -> None:
    inv = Inventory()
    for sku, units in [("ZZ-1", 3), ("AA-1", 3), ("MM-1", 5), ("BB-1", 3)]:
        inv.sell(sku, units)
    assert inv.top_sellers(3) == [("MM-1", 5), ("AA-1", 3), ("BB-1", 3)]


def test_discount_at_exactly_the_threshold() -> None:
    inv = Inventory()
    inv.load([("AB-1", 10, "25.00")])
    assert inv.order_total({"AB-1": 4}) == Decimal("90.00")


def test_cents_round_half_up() -> None:
    inv = Inventory()
    inv.load([("AB-1", 10, "1.005"), ("CD-2", 10, "2.675")])
    assert inv.order_total({"AB-1": 1}) == Decimal("1.01")
    assert inv.order_total({"CD-2": 1}) == Decimal("2.68")


SKUS = ["ab-1", "AB-2", "cd-1", "Ef-3"]


def test_fresh_orders_agree_with_the_reference() -> None:
    """Inputs drawn anew for each grading; every answer compared with the reference's for the same calls."""
    rng = random.Random(seed())

    def sku() -> str:
        name = rng.choice(SKUS)
        return rng.choice(["", " "]) + rng.choice([name.lower(), name.upper()]) + rng.choice(["", "  "])

    rows = [(sku(), rng.randint(0, 9), f"{rng.randint(0, 40000) / 1000:.3f}") for _ in range(6)]
    rows += [(name, rng.randint(0, 9), f"{rng.randint(0, 40000) / 1000:.3f}") for name in SKUS]
    mine, theirs = Inventory(), reference("inventory").Inventory()
    for inv in (mine, theirs):
        inv.load(rows)
    for _ in range(25):
        order = {sku(): rng.randint(1, 6) for _ in range(rng.randint(1, 3))}
        assert mine.order_total(order) == theirs.order_total(order)
        assert mine.reserve(order) == theirs.reserve(order)
        sold, units = sku(), rng.randint(1, 4)
        mine.sell(sold, units)
        theirs.sell(sold, units)
    assert [mine.available(s) for s in SKUS] == [theirs.available(s) for s in SKUS]
    assert mine.top_sellers(3) == theirs.top_sellers(3)
