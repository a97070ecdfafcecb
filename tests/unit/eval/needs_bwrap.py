"""Tests that run model-written code need bubblewrap: skipped without it on a developer machine, a failure in CI
(`make test` installs it)."""

from __future__ import annotations

import os

import pytest

from servelab.eval.sandbox import bwrap_works


def require_bwrap() -> None:
    if bwrap_works():
        return
    if os.environ.get("CI"):
        pytest.fail("bubblewrap is missing or cannot create namespaces; `make test` installs it", pytrace=False)
    pytest.skip("bubblewrap is not available (apt-get install bubblewrap)", allow_module_level=True)
