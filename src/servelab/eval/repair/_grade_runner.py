"""The test process: runs the task's tests (visible and hidden) under pytest, in a sandbox that holds the tests and
servelab's grading runtime (pytest and its dependencies, copied), and never the package under test.

Run as ``python -I -B -c <program> ROOT INI TESTS BASETEMP CONFIG`` (the program is _wire, _proxy and this file;
CONFIG is JSON: the package's top-level names, the pipe numbers to its process and to the reference's, a seed
and a time limit per request). sys.path is the runtime, then ROOT, then the standard library. ``import NAME`` of
the package gives a stand-in (:mod:`._proxy`); ``servelab_grading.reference(NAME)`` gives the reference's module
and ``servelab_grading.seed()`` a number drawn for this grading, for tests that draw fresh inputs and compare
the two. Every test report goes, one JSON line each, to the pipe named by SERVELAB_REPORT_FD, ending with a line
that carries pytest's exit status.
"""

from __future__ import annotations

import json
import os
import sys
import types
from typing import Any

from servelab.eval.repair._proxy import Link, install, remote_module  # servelab: inlined


class Reporter:
    def __init__(self, fd: int, link: Link) -> None:
        self.fd, self.link = fd, link

    def emit(self, row: dict[str, Any]) -> None:
        data = (json.dumps(row) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.emit({"node": report.nodeid, "when": report.when, "outcome": report.outcome,
                   "xfail": hasattr(report, "wasxfail")})  # fmt: skip

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.emit({"collect": report.nodeid, "outcome": "failed"})

    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        self.emit({"final": True, "exitstatus": int(exitstatus), "collected": session.testscollected,
                   "link": self.link.dead})  # fmt: skip


def grading_module(config: dict[str, Any]) -> types.ModuleType:
    """``servelab_grading``: what a task's tests may use besides the package (the reference, a fresh seed)."""
    module = types.ModuleType("servelab_grading")
    pipes = config.get("reference")
    link = Link(pipes[0], pipes[1], float(config["timeout_s"])) if pipes else None

    def reference(name: str) -> Any:
        if link is None:
            raise RuntimeError("this grading has no reference process")
        return remote_module(link, name)

    module.__dict__.update(reference=reference, seed=lambda: int(config["seed"]))
    return module


def main(argv: list[str]) -> int:
    lib, root, ini, tests, basetemp, raw = argv[:6]
    config = json.loads(raw)
    sys.path[:] = [lib, root] + [p for p in sys.path if p and p not in (lib, root) and p != os.getcwd()]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(name, None)
    link = Link(config["package"][0], config["package"][1], float(config["timeout_s"]))
    install(link, set(config["names"]))
    sys.modules["servelab_grading"] = grading_module(config)
    import pytest

    args = ["-q", "-c", ini, "--rootdir", root, "--confcutdir", root, "-p", "no:cacheprovider",
            "-o", "addopts=", "--continue-on-collection-errors", "--basetemp", basetemp, tests]  # fmt: skip
    return int(pytest.main(args, plugins=[Reporter(int(os.environ["SERVELAB_REPORT_FD"]), link)]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
