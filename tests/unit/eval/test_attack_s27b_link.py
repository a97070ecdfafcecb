"""Attack s27b: what the package's process can make the test process do through the new mechanisms (_effects'
warning filename, _shared's per-message cost). servelab's real server program in a plain subprocess (no sandbox).
Each test failed on cbc94b7 and holds since."""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from servelab.eval.repair._proxy import remote_module
from tests.unit.eval.test_repair_wire import _served

PACKAGE = """
import warnings


def warn_at(path, line):
    warnings.warn_explicit("look here", UserWarning, path, line)


class Store:
    def __init__(self, catalog=None):
        self.catalog = catalog
        self.log = []

    def history(self):
        return self.log

    def record(self, i):
        self.log.append(i)

    def ping(self, i):
        return i
"""


@pytest.fixture()
def shop(tmp_path: Path) -> Any:
    (tmp_path / "shop.py").write_text(PACKAGE)
    for link in _served(tmp_path):
        yield remote_module(link, "shop")


def test_a_warning_never_makes_the_test_process_open_a_file_the_package_names(shop: Any, tmp_path: Path) -> None:
    """CLASS: the warning's filename is the package's word and is re-issued as is; pytest's terminal reporter
    (pytest_warning_recorded -> warning_record_to_str -> warnings.formatwarning -> linecache) then opens that path
    in the test process: a FIFO blocks it for ever, /dev/zero makes it read without end, and any file of the test's
    tree (the hidden tests) is read. Here: a FIFO; formatting must finish."""
    from _pytest.warnings import warning_record_to_str

    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        shop.warn_at(str(fifo), 1)
    done = threading.Event()
    threading.Thread(target=lambda: (warning_record_to_str(record[0]), done.set()), daemon=True).start()
    finished = done.wait(5)
    if not finished:  # unblock the reader this test started
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    assert finished, "the test process blocked opening a path the package chose"


def test_a_list_the_package_grows_is_not_sent_whole_each_call(shop: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """CLASS: a change was sent as the whole container: a test holding a log the package appends to re-received
    it whole at every call, O(n^2) for n calls (one process: O(n)). Now a list that only grew sends its new items:
    the items the test process decodes over n calls stay O(n)."""
    from servelab.eval.repair import _proxy

    decoded: list[int] = []
    real = _proxy.decode

    def counting(data: Any, ref: Any, depth: int = 0) -> Any:
        if depth == 0 and type(data) is list:
            decoded.append(len(data))
        return real(data, ref, depth)

    monkeypatch.setattr(_proxy, "decode", counting)
    store = shop.Store()
    log = store.history()
    for i in range(400):
        store.record(i)
    assert log == list(range(400))
    assert sum(decoded) < 3 * 400  # each call brings its one new item (and the answers), not the whole log


LADDER = """
class C0(Exception):
    pass


class C1(C0):
    pass


for _i in range(2, 34):
    globals()[f"C{_i}"] = type(f"C{_i}", (globals()[f"C{_i - 1}"], globals()[f"C{_i - 2}"]), {})


def fail():
    raise C33("deep")
"""


def test_a_deep_class_ladder_costs_the_test_process_linear_work(tmp_path: Path) -> None:
    """CLASS: _errors.Errors.cls keys each class by (module, qualname, keys of its bases), nested tuples whose
    hash CPython does not cache: a lineage where each class has two bases further along (a valid Python ladder,
    Ck(Ck-1, Ck-2)) makes every hash walk a Fibonacci-sized tree, x1.6 per class. This honest 34-class ladder
    takes seconds in the test process, outside the request timeout (decoding runs after the answer arrived);
    a 61-class one (MAX_LINEAGE 64) would take ~10^6 s. Plain Python raises it at once."""
    (tmp_path / "shop.py").write_text(LADDER)
    for link in _served(tmp_path):
        shop = remote_module(link, "shop")
        with pytest.raises(Exception, match="deep"):
            shop.fail()
        keys = list(link.errors.classes)  # flat keys: each base by its number, so hashing one costs its own size
        assert keys and all(type(base) is int for _, _, bases in keys for base in bases)


CHAIN = """
def chain(n):
    out = []
    for i in range(n):
        out = [i, out]
    return out
"""


def test_a_nested_chain_costs_linear_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CLASS: _shared.Shared.changes numbered nested containers one level per pass and rescanned the whole table
    each pass: a chain of d nested lists (a linked list, a tree's spine) cost O(d^2) on the sending side, the
    test process included when the test sends one. Now each container is read once a message: the snapshots the
    test process takes sending a chain of d lists stay O(d)."""
    from servelab.eval.repair import _shared

    (tmp_path / "shop.py").write_text(CHAIN + "\n\ndef first(x):\n    return x[0]\n")
    taken: list[int] = []
    real = _shared.snapshot
    monkeypatch.setattr(_shared, "snapshot", lambda kind, value: taken.append(1) or real(kind, value))
    for link in _served(tmp_path):
        shop = remote_module(link, "shop")
        mine: list = []
        for i in range(2000):
            mine = [i, mine]
        assert shop.first(mine) == 1999 and shop.chain(2000)[0] == 1999
        assert len(taken) < 3 * (2000 + 2000)  # the test's chain sent, the package's applied: each read a few times


TREE = """
def tree(n):
    root = {"name": "root", "children": []}
    for i in range(n):
        root["children"].append({"name": i, "parent": root})
    return root


def ping(i):
    return i
"""


def test_a_dropped_cyclic_result_is_forgotten(tmp_path: Path) -> None:
    """CLASS: the test process forgets a shared container only when its reference count says nothing else holds
    it; a container held by another shared container (a child dict pointing at its parent, any cycle) is never
    forgotten, so every result with a cycle the test ever received stays in both tables for the whole grading and
    every later message snapshots and compares all of it. Plain Python frees them (gc)."""
    (tmp_path / "shop.py").write_text(TREE)
    for link in _served(tmp_path):
        shop = remote_module(link, "shop")

        for _ in range(150):
            assert shop.tree(100)["name"] == "root"  # dropped at once
        shop.ping(0)
        assert len(link.shared.objects) < 300  # one tree's worth at most, not 150 of them


THREADED = """
import threading, time

_stats = {}


def _count():
    i = 0
    while True:
        _stats[str(i % 5000)] = i
        if i % 5000 == 4999:
            _stats.clear()
        i += 1
        if i % 100 == 0:
            time.sleep(0)


threading.Thread(target=_count, daemon=True).start()


def stats():
    return _stats


def ping(i):
    return i
"""


def test_a_package_thread_changing_a_shared_dict_is_not_tampering(tmp_path: Path) -> None:
    """CLASS: the package's side encodes a changed shared container with Python-level loops over it
    (_wire._plain_keys, _wire._as) after the request ran, outside reply's try; a package thread that changes the
    dict meanwhile raises RuntimeError('dictionary changed size during iteration'), which serve() does not catch:
    the package's process dies, the link is dead and the grader says "tampered". In one process nothing fails
    (the test only reads the dict)."""
    (tmp_path / "shop.py").write_text(THREADED)
    for link in _served(tmp_path):
        shop = remote_module(link, "shop")
        seen = shop.stats()
        for i in range(300):
            assert shop.ping(i) == i
        assert type(seen) is dict and link.dead is None
