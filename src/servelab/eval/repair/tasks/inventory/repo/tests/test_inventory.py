from decimal import Decimal

from inventory import Inventory


def make() -> Inventory:
    inv = Inventory()
    inv.load([("AB-1", 10, "2.50"), ("CD-2", 4, "10.00"), ("EF-3", 0, "99.99")])
    return inv


def test_load_and_available() -> None:
    inv = make()
    assert inv.available("AB-1") == 10
    assert inv.available("EF-3") == 0
    assert inv.available("ZZ-9") == 0


def test_normalize_strips_whitespace_and_case() -> None:
    assert Inventory.normalize("  ab-1 ") == "AB-1"


def test_reserve_takes_stock() -> None:
    inv = make()
    assert inv.reserve({"AB-1": 3, "CD-2": 1})
    assert inv.available("AB-1") == 7
    assert inv.available("CD-2") == 3


def test_reserve_refuses_when_short() -> None:
    inv = make()
    assert not inv.reserve({"CD-2": 5})


def test_top_sellers_by_units() -> None:
    inv = make()
    inv.sell("AB-1", 5)
    inv.sell("CD-2", 2)
    inv.sell("AB-1", 1)
    assert inv.top_sellers(2) == [("AB-1", 6), ("CD-2", 2)]


def test_order_total_with_discount() -> None:
    inv = make()
    assert inv.order_total({"CD-2": 20}) == Decimal("180.00")
