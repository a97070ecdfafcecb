"""Attack s27b: the package's exception classes as values in the test (built by the test, handed to the package).
servelab's real server program in a plain subprocess, against the same package imported plainly. Each `through
servelab` case failed on cbc94b7 and holds since."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from servelab.eval.repair._proxy import remote_module
from tests.unit.eval.test_repair_wire import _served

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


@pytest.fixture(params=["in process", "through servelab"])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    (tmp_path / "shop.py").write_text(PACKAGE)
    if request.param == "in process":
        spec = importlib.util.spec_from_file_location("shop", tmp_path / "shop.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["shop"] = module
        spec.loader.exec_module(module)
        yield module
        sys.modules.pop("shop", None)
        return
    for link in _served(tmp_path):
        yield remote_module(link, "shop")
