"""Attack s27b: the new _errors / _effects / _shared mechanisms, through servelab's real server program in a plain
subprocess (no sandbox), against the same package imported plainly in this process. Each test asserts what plain
pytest in one process does; each failed on cbc94b7 and holds since (what still does not is listed in
docs/repair-grading.md)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.eval.test_repair_wire import WAYS, both_ways

PACKAGE = """
import asyncio, warnings


class Abort(BaseException):
    pass


def abort():
    raise Abort("stop")


def cancelled():
    raise asyncio.CancelledError()


def old():
    warnings.warn("old() is deprecated, use new()", DeprecationWarning, stacklevel=2)
    return 1


def noisy():
    warnings.warn("noisy", UserWarning)
    return 2


def take(items):
    warnings.warn("take() is deprecated", DeprecationWarning)
    items.pop()


def dump(data):
    import sys
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return len(data)


def encoding():
    import sys
    return sys.stdout.encoding.lower()


def safe():
    try:
        warnings.warn("might be an error", UserWarning)
    except UserWarning:
        return "handled"
    return "plain"
"""


@pytest.fixture(params=WAYS)
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    for module, _ in both_ways(request.param, tmp_path, PACKAGE):
        yield module


# --- _errors: BaseException-only classes become Exception (RuntimeError) ------------------------------------------


def test_a_baseexception_subclass_is_not_caught_by_raises_exception(shop: Any) -> None:
    """CLASS: every BaseException-only builtin in a lineage (BaseException itself, not only KeyboardInterrupt and
    GeneratorExit) is rebuilt as RuntimeError, so the package's class becomes an Exception: `pytest.raises(Exception)`
    and `except Exception` in a test catch what plain pytest lets through (a wrong repair passes)."""
    with pytest.raises(BaseException) as info:
        shop.abort()
    assert not isinstance(info.value, Exception)


def test_asyncio_cancelled_error_is_not_an_exception(shop: Any) -> None:
    with pytest.raises(BaseException) as info:
        shop.cancelled()
    assert not isinstance(info.value, Exception)


# --- _effects: a warning re-issued without its module, at the serve loop's frame, after the code ran ------------


def test_a_module_filter_for_the_package_applies(shop: Any) -> None:
    """CLASS: warn_explicit is called without `module`, so Python derives the module from the filename
    ('/.../shop'); a filter naming the package's module (`ignore::UserWarning:shop`, the usual ini line) never
    matches, and with `error` the warning fails a correct repair."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=UserWarning, module="shop")
        assert shop.noisy() == 2


def test_stacklevel_2_points_at_the_caller(shop: Any) -> None:
    """CLASS: the package's warning is recorded in the package's process, where the caller of the package's
    function (stacklevel=2) is servelab's serve loop ('<string>'), not the test: the test sees the loop's file and
    line, so a test that the deprecation points at the caller fails for a correct fix."""
    with pytest.warns(DeprecationWarning) as record:
        shop.old()
    assert record[0].filename == __file__


def test_a_repeated_warning_is_shown_once_per_location(shop: Any) -> None:
    """CLASS: warn_explicit is re-issued with no registry (and no module), so the 'default' action's once-per-
    location rule (the package module's __warningregistry__) never applies: two identical warnings from one line
    are two records in the test; in one process, one."""
    with warnings.catch_warnings(record=True) as record:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        shop.noisy()
        shop.noisy()
    assert len(record) == 1


def test_the_package_can_write_bytes_to_stdout(shop: Any, capsysbinary: Any) -> None:
    """CLASS: the package's sys.stdout/sys.stderr while it answers are io.StringIO (contextlib.redirect_stdout),
    not text streams: no .buffer, .encoding None, no reconfigure(); pytest's capture streams (fd capture and
    capsys alike) have them, so a correct package that writes bytes to sys.stdout.buffer fails."""
    assert shop.dump(b"a,b\n") == 4
    assert capsysbinary.readouterr().out == b"a,b\n"


def test_the_package_can_read_the_stdout_encoding(shop: Any) -> None:
    assert shop.encoding() in ("utf-8", "utf8")
