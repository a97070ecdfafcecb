"""What the package does to its process besides answering, carried to the test process with the answer: what it
printed (``sys.stdout``, ``sys.stderr``) and the warnings it raised, so ``capsys``, ``pytest.warns`` and a warning
filter of ``error`` see them as in one process.

The rules it keeps:
- The package's process records every warning (filter ``always``) and what is printed through ``sys.stdout`` and
  ``sys.stderr`` while it answers a request; the test process writes the text to its own ``sys.stdout`` and
  ``sys.stderr`` and issues each warning again, at the package's file and line, under the test's own filters,
  before the answer is returned or raised (a warning turned into an error is what the test sees).
- A warning's category is rebuilt as an exception class is (:mod:`._errors`); its message is text.
- Bounded: at most ``MAX_EFFECT_CHARS`` of each stream and ``MAX_WARNINGS`` warnings a request.
Not carried: writes to the file descriptors themselves, logging records (``caplog``), the environment, the random
state, the working folder.

Standard library only; inside the sandbox this source follows _wire's in one ``python -c`` program.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from servelab.eval.repair._errors import Errors  # servelab: inlined
from servelab.eval.repair._wire import WireError  # servelab: inlined

MAX_EFFECT_CHARS = 1 << 20
MAX_WARNINGS = 100


@contextlib.contextmanager
def recorded(into: dict[str, Any], lineage: Callable[[type], list[list[Any]]]) -> Iterator[None]:
    """The package's side: what runs inside is recorded into ``into`` (``out``, ``err``, ``warnings``)."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        with contextlib.redirect_stderr(err):
            try:
                yield
            finally:
                into["out"], into["err"] = out.getvalue()[:MAX_EFFECT_CHARS], err.getvalue()[:MAX_EFFECT_CHARS]
                into["warnings"] = [
                    {"category": lineage(w.category), "message": str(w.message)[:MAX_EFFECT_CHARS],
                     "filename": str(w.filename)[:500], "lineno": int(w.lineno or 0)}
                    for w in caught[:MAX_WARNINGS]
                ]  # fmt: skip


def checked(message: dict[str, Any], errors: Errors) -> tuple[str, str, list[tuple[str, type[Warning], str, int]]]:
    """The test's side: the effects an answer carries, checked (:class:`WireError` for anything else)."""
    out, err, said = message.get("out", ""), message.get("err", ""), message.get("warnings", [])
    if type(out) is not str or type(err) is not str or type(said) is not list or len(said) > MAX_WARNINGS:
        raise WireError("effects that are not text and a short list")
    warned = []
    for w in said:
        if type(w) is not dict or type(w.get("message")) is not str or type(w.get("filename")) is not str:
            raise WireError("a warning without its message")
        category = errors.cls(w.get("category"))
        if not issubclass(category, Warning) or type(w.get("lineno")) is not int:
            raise WireError("a warning whose category is not a Warning")
        warned.append((w["message"], category, w["filename"], w["lineno"]))
    return out, err, warned


def replay(effects: tuple[str, str, list[tuple[str, type[Warning], str, int]]]) -> None:
    """Print here what the package printed and warn what it warned (a warning the test's filters make an error
    raises here, as it would have in the package's code)."""
    out, err, warned = effects
    if out:
        sys.stdout.write(out)
    if err:
        sys.stderr.write(err)
    for text, category, filename, lineno in warned:
        warnings.warn_explicit(text, category, filename, lineno)
