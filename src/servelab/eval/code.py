"""Grade model-written functions: the reply's code and the item's tests, run together in the sandbox."""

from __future__ import annotations

import shutil

from servelab.eval.grade import Grade, Outcome, extract_code, from_channels
from servelab.eval.items import Item
from servelab.eval.sandbox import Limits, fresh_copy, run

RUNNER = "import sys\nexec(compile(open('solution.py').read(), 'solution.py', 'exec'))\n"


def grade_code(item: Item, reply: str, kind: str, limits: Limits) -> Grade:
    """Strict: the reply is one code block (or bare code) and the tests pass. Semantic: the tests pass on the
    first code block found in a reply with prose around it. A test run that hits the time limit is a
    timeout."""
    code, only_code = extract_code(reply)
    work = fresh_copy(files={"solution.py": code + "\n", "check.py": RUNNER + item.tests})
    try:
        result = run(["python", "check.py"], work, kind=kind, limits=limits)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if result.timed_out:
        return Grade(Outcome.TIMEOUT, False, False, f"tests ran past {limits.timeout_s:g} s (sandbox={kind})")
    detail = f"sandbox={kind}; " + (result.stderr.strip().splitlines() or ["tests passed"])[-1][:300]
    return from_channels(result.ok and only_code, result.ok, detail)
