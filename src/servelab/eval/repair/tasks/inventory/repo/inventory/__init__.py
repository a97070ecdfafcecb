"""A small inventory and reservation package."""

from inventory.core import Inventory

__all__ = ["Inventory"]
