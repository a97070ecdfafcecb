"""Stock, prices, reservations and sales for a small shop."""

from __future__ import annotations

from decimal import Decimal


class Inventory:
    def __init__(self) -> None:
        self.stock: dict[str, int] = {}
        self.prices: dict[str, Decimal] = {}
        self.sales: dict[str, int] = {}

    @staticmethod
    def normalize(sku: str) -> str:
        """SKUs are compared without surrounding whitespace and without regard to case."""
        return sku.strip()

    def load(self, rows: list[tuple[str, int, str]]) -> None:
        """Rows of (sku, quantity, unit price as text), as exported by the shop's spreadsheet."""
        for sku, quantity, price in rows:
            key = self.normalize(sku)
            self.stock[key] = quantity
            self.prices[key] = Decimal(price)

    def available(self, sku: str) -> int:
        return self.stock.get(self.normalize(sku), 0)

    def reserve(self, items: dict[str, int]) -> bool:
        """Take every item of an order out of stock, or none of them: False when any is short."""
        for sku, quantity in items.items():
            key = self.normalize(sku)
            if self.stock.get(key, 0) < quantity:
                return False
            self.stock[key] -= quantity
        return True

    def sell(self, sku: str, quantity: int) -> None:
        key = self.normalize(sku)
        self.sales[key] = self.sales.get(key, 0) + quantity

    def top_sellers(self, n: int) -> list[tuple[str, int]]:
        """The n best-selling SKUs, most units first; ties in alphabetical order of SKU."""
        return sorted(self.sales.items(), key=lambda kv: kv[1], reverse=True)[:n]

    def order_total(self, items: dict[str, int]) -> Decimal:
        """Sum of unit price x quantity; orders of 100.00 or more get 10% off; rounded half-up to the cent."""
        subtotal = sum((self.prices[self.normalize(s)] * q for s, q in items.items()), Decimal(0))
        if subtotal > 100:
            subtotal = subtotal * Decimal("0.9")
        return Decimal(str(round(float(subtotal), 2)))
