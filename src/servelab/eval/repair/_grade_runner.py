"""servelab's grading runner: copied into the sandbox's read-only library and run there as
``python3 -I -B servelab_grade_runner.py ROOT INI TESTS BASETEMP`` (isolated: no user site, no environment
hooks, no current-directory entry on sys.path). Standard library and pytest only.

sys.path is this library first, then the graded tree, then the standard library: nothing in the tree shadows
pytest. The configuration is the INI servelab chose (``-c``: no discovery in the tree), plugins are not
auto-loaded, and every test report goes, one JSON line each, to the pipe named by SERVELAB_REPORT_FD, ending
with a line that carries pytest's exit status. The grader reads that pipe from outside the process and checks
it against the process's own exit code and against the canary tests it planted.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

LIB = os.path.dirname(os.path.abspath(__file__))


class Reporter:
    def __init__(self, fd: int) -> None:
        self.fd = fd

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
        self.emit({"final": True, "exitstatus": int(exitstatus), "collected": session.testscollected})


def main() -> int:
    root, ini, tests, basetemp = sys.argv[1:5]
    fd = int(os.environ["SERVELAB_REPORT_FD"])
    sys.path[:] = [LIB, root] + [p for p in sys.path if p and p not in (LIB, root) and p != os.getcwd()]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(name, None)
    import pytest

    args = ["-q", "-c", ini, "--rootdir", root, "--confcutdir", root, "-p", "no:cacheprovider",
            "-o", "addopts=", "--continue-on-collection-errors", "--basetemp", basetemp, tests]  # fmt: skip
    return int(pytest.main(args, plugins=[Reporter(fd)]))


if __name__ == "__main__":
    sys.exit(main())
