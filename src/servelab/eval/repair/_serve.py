"""The package's side of grading: run in a sandbox of its own as ``python -I -B -c <program> ROOT IN OUT``, it
imports the graded package (or the task's reference) from ROOT and answers the test process's requests, one JSON
line each way on the two pipes IN and OUT: import a module, get or set an attribute, call, index, list, len,
bool. Objects stay here; the test process gets plain data (:mod:`._wire`) or a numbered handle: one number per
object (the same object, the same number).
An instance of a subclass of a plain type that behaves as its base type goes as that base type's value
(``encode(..., as_base=True)``: a ``Counter`` as a Counter, an ``IntEnum`` member as its int). A mutable container
(a list, dict, set) is shared with the test process (:mod:`._shared`): one object on each side, the same contents
at every message.

The rule it keeps: nothing the tests compare with ever comes here. A request carries only what a test hands to
the package (module and attribute names, arguments, keys), never the other side of an ``==``, so the code under
test, which may rewrite this very loop, has no expected value to read. Whatever it answers, the test process
checks the answer is plain data before any test sees it.

Standard library only; inside the sandbox this source follows _wire's in one ``python -c`` program.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import sys
from typing import Any

from servelab.eval.repair._effects import ProcessState, recorded  # servelab: inlined
from servelab.eval.repair._errors import MAX_TEXT_CHARS, attr_name  # servelab: inlined
from servelab.eval.repair._shared import Shared  # servelab: inlined
from servelab.eval.repair._wire import (  # servelab: inlined
    MAX_MESSAGE,
    WireError,
    contents,
    decode,
    dumps,
    encode,
    loads,
)

MAX_ITEMS = 100_000  # items one "list" request may return


class Objects:
    """What the test process holds handles to, kept alive here; a handle is an index into this table."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.index: dict[int, int] = {}
        self.shared = Shared(parity=1)  # the mutable containers that crossed (this side numbers them odd)
        self.process = ProcessState()  # the environment's changes and random's state, in step with the test's
        self.root = sys.path[0] if sys.path else ""  # the package's tree (serve puts it first)

    def handle(self, value: Any) -> dict[str, Any]:
        if isinstance(value, type) and issubclass(value, BaseException):
            return {"$": "exc_class", "mro": lineage(value)}
        number = self.index.get(id(value))
        if number is None:
            number = self.index[id(value)] = len(self.items)
            self.items.append(value)
        name = getattr(value, "__qualname__", None) or type(value).__qualname__
        return {"$": "ref", "id": number, "name": str(name)[:200]}

    def resolve(self, tag: dict[str, Any]) -> Any:
        if tag.get("$") == "shared":
            return self.shared.resolve(tag)
        number = tag.get("id")
        if tag.get("$") != "ref" or type(number) is not int or not 0 <= number < len(self.items):
            raise WireError("not a handle this process gave")
        return self.items[number]


def lineage(cls: type) -> list[list[Any]]:
    """The class's MRO, each class with the places of its direct bases in it (the graph, not only the order)."""
    place = {c: i for i, c in enumerate(cls.__mro__)}
    return [[str(c.__module__), str(c.__qualname__), [place[b] for b in c.__bases__ if b in place]]
            for c in cls.__mro__]  # fmt: skip


def described(exc: BaseException, depth: int = 0) -> dict[str, Any]:
    """An exception as the test process rebuilds it (:mod:`._errors`): its lineage, args (plain data, else their
    text), attributes that are plain data, its text, and its cause and context two deep."""
    args = []
    for a in exc.args[:8]:
        try:
            args.append(encode(a, _unplain, as_base=True))
        except (WireError, TypeError, ValueError, RecursionError):
            args.append(str(a)[:2000])
    out: dict[str, Any] = {"mro": lineage(type(exc)), "args": args, "attrs": {}}
    for name, value in list(getattr(exc, "__dict__", {}).items())[:32]:
        if attr_name(name):
            try:
                out["attrs"][name] = encode(value, _unplain, as_base=True)
            except (WireError, TypeError, ValueError, RecursionError):
                continue
    with contextlib.suppress(Exception):  # the package's __str__ failed: the test's text comes from the args
        out["text"] = str(exc)[:MAX_TEXT_CHARS]
    for key in ("cause", "context"):
        linked = getattr(exc, f"__{key}__", None)
        if depth < 2 and isinstance(linked, BaseException):
            out[key] = described(linked, depth + 1)
    if depth < 2 and isinstance(exc, BaseExceptionGroup):
        out["members"] = [described(member, depth + 1) for member in exc.exceptions[:16]]
    out["suppress"] = exc.__suppress_context__ is True
    return out


def answer(objects: Objects, request: dict[str, Any]) -> Any:
    """Do what one request asks, with the package's own code."""
    op = request.get("op")

    def arg(key: str) -> Any:
        return decode(request.get(key), objects.resolve)

    if op == "import":
        return importlib.import_module(str(request.get("name")))
    target = objects.resolve(request.get("ref") or {})
    if op == "getattr":
        return getattr(target, str(request.get("name")))
    if op == "setattr":
        return setattr(target, str(request.get("name")), arg("value"))
    if op == "call":
        return target(*arg("args"), **arg("kwargs"))
    if op == "getitem":
        return target[arg("key")]
    if op == "list":
        items = list(itertools.islice(iter(target), MAX_ITEMS + 1))
        if len(items) > MAX_ITEMS:
            raise ValueError(f"more than {MAX_ITEMS} items")
        return items
    if op == "len":
        return len(target)
    if op == "bool":
        return bool(target)
    if op == "dir":
        return [str(name) for name in dir(target)][:MAX_ITEMS]
    raise WireError(f"no operation {str(op)[:40]!r}")


def reply(objects: Objects, request: dict[str, Any]) -> dict[str, Any]:
    """The answer, with the shared containers that changed (the test's changes are applied before the request is
    read, the package's after it ran are sent with the answer, an exception's included)."""
    shared = objects.shared
    shared.forget(request.get("forget", []))
    shared.apply(request.get("state", []), lambda content: decode(content, objects.resolve))
    objects.process.incoming(request.get("process", {}))
    effects: dict[str, Any] = {}
    with recorded(effects, lineage, objects.root):
        try:
            out: dict[str, Any] = {"ok": encode(answer(objects, request), objects.handle, as_base=True, share=shared)}
        except BaseException as exc:  # the package's own exceptions, SystemExit included, go back to the test
            out = {"raise": described(exc)}
    # a container that stopped being plain data stops being shared (the test's copy keeps what it last held); the
    # answer itself is unaffected, as in one process
    out["state"], out["detached"] = shared.changes(lambda value, kind: contents(value, kind, objects.handle, True,
                                                                                shared))  # fmt: skip
    out["process"] = objects.process.outgoing()
    return out | effects


def _unplain(value: Any) -> dict[str, Any]:
    raise TypeError(type(value).__name__)


def serve(root: str, fd_in: int, fd_out: int) -> None:
    sys.path[:] = [root, *[p for p in sys.path if p and p != root]]
    objects = Objects()
    with os.fdopen(fd_in, "rb") as requests:
        for line in requests:
            try:
                out = dumps(reply(objects, loads(line)))
                if len(out) > MAX_MESSAGE:
                    raise ValueError(f"an answer of over {MAX_MESSAGE} bytes")
            except Exception as exc:  # whatever the package's code did to this loop's reading: an error, not a crash
                out = dumps({"raise": {"mro": lineage(TypeError), "args": [f"not plain data: {exc}"[:500]]}})
            while out:
                out = out[os.write(fd_out, out) :]


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
