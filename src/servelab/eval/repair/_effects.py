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
- The environment's changes and the ``random`` module's state are kept in step both ways (:class:`ProcessState`):
  ``monkeypatch.setenv`` and ``random.seed`` in a test reach the package, and what the package sets reaches the
  test.
Not carried: writes to the file descriptors themselves, logging records (``caplog``), the working folder.

Standard library only; inside the sandbox this source follows _wire's in one ``python -c`` program.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from servelab.eval.repair._errors import Errors  # servelab: inlined
from servelab.eval.repair._wire import WireError  # servelab: inlined

MAX_EFFECT_CHARS = 1 << 20
MAX_WARNINGS = 100


@contextlib.contextmanager
def recorded(into: dict[str, Any], lineage: Callable[[type], list[list[Any]]], root: str) -> Iterator[None]:
    """The package's side: what runs inside is recorded into ``into`` (``out``, ``err``, ``warnings``; a warning
    by where it was raised in the package's tree, ``root``, and its module, or as raised outside the package)."""
    out, err = _stream(), _stream()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        with contextlib.redirect_stderr(err):
            try:
                yield
            finally:
                into["out"], into["err"] = _captured(out), _captured(err)
                into["warnings"] = [
                    {"category": lineage(w.category), "message": str(w.message)[:MAX_EFFECT_CHARS],
                     **_where(str(w.filename), root), "lineno": int(w.lineno or 0)}
                    for w in caught[:MAX_WARNINGS]
                ]  # fmt: skip


def _stream() -> io.TextIOWrapper:
    """A text stream as a real ``sys.stdout`` is (``.buffer``, ``.encoding``, ``reconfigure``)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)


def _captured(stream: io.TextIOWrapper) -> str:
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    return str(raw.decode("utf-8", "replace"))[:MAX_EFFECT_CHARS]


def _where(filename: str, root: str) -> dict[str, Any]:
    """A file of the package's tree by its path there and its module; anything else (servelab's loop, the standard
    library) as outside the package."""
    inside = os.path.realpath(filename)
    base = os.path.realpath(root)
    if not inside.startswith(base + os.sep) or not inside.endswith(".py"):
        return {"where": None, "module": None}
    rel = os.path.relpath(inside, base)
    module = rel[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
    return {"where": rel[:500], "module": module[:200]}


Warned = tuple[str, type[Warning], str | None, str | None, int]


def checked(message: dict[str, Any], errors: Errors) -> tuple[str, str, list[Warned]]:
    """The test's side: the effects an answer carries, checked (:class:`WireError` for anything else)."""
    out, err, said = message.get("out", ""), message.get("err", ""), message.get("warnings", [])
    if type(out) is not str or type(err) is not str or type(said) is not list or len(said) > MAX_WARNINGS:
        raise WireError("effects that are not text and a short list")
    warned = []
    for w in said:
        if type(w) is not dict or type(w.get("message")) is not str or type(w.get("lineno")) is not int:
            raise WireError("a warning without its message")
        where, module = w.get("where"), w.get("module")
        if (where is None) != (module is None) or not (module is None or _MODULE.fullmatch(str(module))):
            raise WireError("a warning whose place is not a file of the package and its module")
        if where is not None and (type(where) is not str or len(where) > 500):
            raise WireError("a warning whose place is not a path")
        category = errors.cls(w.get("category"))
        if not issubclass(category, Warning):
            raise WireError("a warning whose category is not a Warning")
        warned.append((w["message"], category, where, module, w["lineno"]))
    return out, err, warned


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def replay(effects: tuple[str, str, list[Warned]], registries: dict[str, dict[Any, Any]]) -> None:
    """Print here what the package printed and warn what it warned, under the test's filters (an error raises here),
    with the module and once-per-place registry Python's own ``warn`` would use. A warning raised in the package's
    file is placed at ``<package PATH>`` (a name no reader opens: the test process never reads a path the package
    names); one raised outside it (``stacklevel`` past the package) at the test's own call."""
    out, err, warned = effects
    if out:
        sys.stdout.write(out)
    if err:
        sys.stderr.write(err)
    for text, category, where, module, lineno in warned:
        if where is None:
            caller = _caller()  # a frame object only where one is needed (it keeps its callers' frames alive)
            registry = caller.f_globals.setdefault("__warningregistry__", {})
            warnings.warn_explicit(text, category, caller.f_code.co_filename, caller.f_lineno,
                                   caller.f_globals.get("__name__"), registry)  # fmt: skip
        else:
            registry = registries.setdefault(str(module), {})
            warnings.warn_explicit(text, category, f"<package {where}>", lineno, module, registry)


def _caller() -> Any:
    """The first frame outside this program (whose code is ``<string>`` in the sandbox, servelab's modules where
    they are imported): the test's call into the package."""
    frame = sys._getframe(1)
    while frame.f_back is not None and _ours(frame):
        frame = frame.f_back
    return frame


_PACKAGE = __name__.rpartition(".")[0]  # servelab's grading modules where imported ("" inside the program)


def _ours(frame: Any) -> bool:
    name = str(frame.f_globals.get("__name__"))
    return bool(frame.f_code.co_filename == "<string>" or (_PACKAGE and name.startswith(_PACKAGE)))


class ProcessState:
    """The process state a test and its package share in one process, kept in step at every message: the
    environment's changes since the grading started (set and removed names; each side applies them to its own
    start, so neither sees the other's start) and the ``random`` module's state. Each message carries what changed
    since the last one crossed; the receiver applies it before anything else."""

    def __init__(self) -> None:
        self.start = dict(os.environ)
        self.env: dict[str, Any] | None = None  # the changes as they last crossed
        self.random: Any = None

    def outgoing(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        env = {"set": {k: v for k, v in os.environ.items() if self.start.get(k) != v},
               "unset": sorted(k for k in self.start if k not in os.environ)}  # fmt: skip
        if env != self.env and (self.env is not None or env != {"set": {}, "unset": []}):
            out["env"] = self.env = env
        state = random.getstate()
        if state != self.random:
            out["random"], self.random = [state[0], list(state[1]), state[2]], state
        return out

    def incoming(self, data: Any) -> None:
        """Apply what the other side sent (:class:`WireError` for anything that is not such state)."""
        if type(data) is not dict:
            raise WireError("process state that is not a map")
        if "env" in data:
            env = data["env"]
            names = env.get("set") if type(env) is dict else None
            unset = env.get("unset") if type(env) is dict else None
            if type(names) is not dict or type(unset) is not list or not all(
                type(k) is str and type(v) is str for k, v in names.items()
            ) or not all(type(k) is str for k in unset):  # fmt: skip
                raise WireError("an environment that is not names and text")
            merged = {k: v for k, v in {**self.start, **names}.items() if k not in unset}
            try:
                os.environ.clear()
                os.environ.update(merged)
            except (ValueError, OSError) as exc:  # a name the platform refuses (an "=", a NUL)
                raise WireError(f"an environment this process cannot hold: {exc}") from None
            self.env = {"set": names, "unset": unset}
        if "random" in data:
            self.random = _random_state(data["random"])
            random.setstate(self.random)


def _random_state(raw: Any) -> tuple[Any, ...]:
    """``random.getstate()``'s shape: version 3, 625 words (the last the position), the cached gauss or None."""
    ok = type(raw) is list and len(raw) == 3 and raw[0] == 3 and type(raw[1]) is list and len(raw[1]) == 625
    if not ok or not all(type(w) is int and 0 <= w < 1 << 32 for w in raw[1]) or raw[1][-1] > 624:
        raise WireError("a random state that is not the random module's")
    if raw[2] is not None and type(raw[2]) is not float:
        raise WireError("a random state whose gauss is not a float")
    return (3, tuple(raw[1]), raw[2])
