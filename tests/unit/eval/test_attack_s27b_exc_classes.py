"""Attack s27b: the package's exception classes as values in the test (built by the test, handed to the package).
servelab's real server program in a plain subprocess, against the same package imported plainly. Each `through
servelab` case failed on cbc94b7 and holds since."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.eval.test_repair_wire import WAYS, both_ways

PACKAGE = '''
class StockError(Exception):
    pass


class OutOfStock(StockError, LookupError):
    def __init__(self, sku, available):
        super().__init__(sku, available)
        self.sku, self.available = sku, available

    def __str__(self):
        return f"{self.sku}: only {self.available} left"


def retry(times, errors):
    """Calls nothing; says which of ``errors`` it would retry on (a tuple of exception classes)."""
    return [e.__name__ for e in errors]


def _make():
    class Rejected(StockError):
        pass

    return Rejected


SoftReject = _make()
HardReject = _make()


def hard():
    raise HardReject("no")


def describe(error):
    return f"{type(error).__name__}: {error}"
'''


@pytest.fixture(params=WAYS)
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    for module, _ in both_ways(request.param, tmp_path, PACKAGE):
        yield module
