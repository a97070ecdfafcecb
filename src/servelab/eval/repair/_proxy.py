"""The test process's side of grading: ``import inventory`` in a test gives a stand-in whose every use is a
request to the process that really imports the package (:mod:`._serve`), over two pipes.

The rules it keeps:
- Only what a test hands to the package is sent: module and attribute names, arguments, keys, values set on
  an attribute. Comparing a result (``==``, ``<``, ``in``, ``approx``, ``pytest.raises``) happens here, on plain
  data, and sends nothing; the package's own ``__eq__``, ``__hash__`` or ``__contains__`` never decides one.
- One :class:`Remote` per remote object (per link and handle number, for the link's life), so ``is`` and
  ``id()`` say what they say of the package's objects. A handle is opaque: ``==`` or ``!=`` with anything but
  itself, ``hash()`` and ``in`` raise :class:`TypeError` in the test (the test fails). Only the package's code
  could answer them, and what the package says of its own classes (the traits its loop sends with a handle) is
  not trusted: its loop may be rewritten, so a class with its own ``__eq__`` could be passed off as one that
  compares by identity.
- A list, dict or set that crosses is shared (:mod:`._shared`): each request carries the test's changes to the
  shared containers, each answer the package's, applied before anything else in it is read.
- Every answer is decoded by :func:`._wire.decode`: plain data, a handle (:class:`Remote`), a class for a remote
  exception class, or the remote exception raised here as an instance of that class; anything else, a late
  answer, or one past ``timeout_s`` fails the test that asked and every later one (the link is then dead).

Standard library only; inside the sandbox this source follows _wire's in one ``python -c`` program.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import select
import sys
import time
import types
from typing import Any

from servelab.eval.repair._effects import ProcessState, checked, replay  # servelab: inlined
from servelab.eval.repair._errors import Errors  # servelab: inlined
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


class PackageError(RuntimeError):
    """The package's process did not answer with plain data in time (it crashed, hung or wrote garbage)."""


class Link:
    """One package process: requests out on ``fd_out``, answers in on ``fd_in``, one at a time."""

    def __init__(self, fd_out: int, fd_in: int, timeout_s: float) -> None:
        self.fd_out, self.fd_in, self.timeout_s = fd_out, fd_in, timeout_s
        self.buffer = b""
        self.requests = 0  # sent so far (a test can see that comparing sent none)
        self.dead: str | None = None
        self.errors = Errors()  # the package's exception classes, rebuilt here
        self.remotes: dict[int, Remote] = {}  # handle number -> its one stand-in
        self.shared = Shared(parity=0)  # the mutable containers that crossed (this side numbers them even)
        self.forgotten: list[int] = []  # numbers forgotten here, not yet told to the package's process
        self.process = ProcessState()  # the environment's changes and random's state, in step with the package's
        self.warned: dict[str, dict[Any, Any]] = {}  # the once-per-place registry of each module of the package

    def ask(self, request: dict[str, Any]) -> Any:
        """One request (its values encoded with :func:`_send`), with what the package's process must forget and
        the shared containers the test changed; the answer decoded after the package's changes are applied."""
        if self.dead:
            raise PackageError(self.dead)
        self.forgotten += self.shared.unheld()  # told with the first request that goes out
        request["forget"] = self.forgotten
        request["state"], broken = self.shared.changes(lambda value, kind: contents(value, kind, self._as_ref, False,
                                                                                    self.shared))  # fmt: skip
        if broken:  # told with the next request; this one fails, as handing the package a non-plain value does
            self.forgotten += broken
            raise TypeError(f"a list, dict or set handed to the package holds what cannot go: {self.shared.why}")
        request["process"] = self.process.outgoing()
        data = dumps(request)
        self.requests += 1
        try:
            while data:
                data = data[os.write(self.fd_out, data) :]
            self.forgotten = []
            message = loads(self._line())
        except (OSError, PackageError) as exc:
            self.dead = f"the package's process stopped answering: {exc}"
            raise PackageError(self.dead) from None
        except WireError as exc:
            self.dead = f"an answer that is not plain data: {exc}"
            raise PackageError(self.dead) from None
        return self._outcome(message)

    def _outcome(self, message: dict[str, Any]) -> Any:
        error: BaseException | None = None
        try:
            self.shared.forget(message.get("detached", []))
            self.shared.apply(message.get("state", []), lambda content: decode(content, self._ref))
            self.process.incoming(message.get("process", {}))
            effects = checked(message, self.errors)
            if "raise" in message:
                error = self.errors.instance(message["raise"], lambda data: decode(data, self._ref))
            else:
                value = decode(message["ok"], self._ref)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            self.dead = f"an answer that is not plain data: {exc}"
            raise PackageError(self.dead) from None
        replay(effects, self.warned)  # what the package printed and warned, before its answer
        if error is not None:
            raise error
        return value

    def _line(self) -> bytes:
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd_in], [], [], left)[0]:
                raise PackageError(f"no answer within {self.timeout_s:g} s")
            chunk = os.read(self.fd_in, 1 << 16)
            if not chunk:
                raise PackageError("the process ended")
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE:
                raise PackageError("an answer over the size limit")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def _ref(self, tag: dict[str, Any]) -> Any:
        if tag["$"] == "exc_class":
            return self.errors.cls(tag.get("mro"))
        if tag["$"] == "shared":
            return self.shared.resolve(tag)
        number = tag.get("id")
        if type(number) is not int:
            raise WireError("a handle without a number")
        remote = self.remotes.get(number)  # the traits a handle comes with are the package's word: not read
        if remote is None:
            remote = self.remotes[number] = Remote(self, number, str(tag.get("name", "object"))[:200])
        return remote

    def _as_ref(self, item: Any) -> dict[str, Any]:
        if isinstance(item, Remote) and object.__getattribute__(item, "_link") is self:
            return {"$": "ref", "id": object.__getattribute__(item, "_id")}
        raise TypeError(f"only plain data and the package's own objects can be handed to it, not {item!r}")


def _send(link: Link, value: Any) -> Any:
    """``value`` for ``link``'s process: plain data (its lists, dicts and sets shared), and handles to that
    process's own objects only."""
    return encode(value, link._as_ref, share=link.shared)


class Remote:
    """An object of the package's process. Using it asks that process; comparing it sends nothing, and it compares
    as plain Python would only where that needs no code of the package (see the module's rules)."""

    __slots__ = ("_id", "_link", "_name")

    def __init__(self, link: Link, number: int, name: str) -> None:
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_id", number)
        object.__setattr__(self, "_name", name)

    @property
    def __doc__(self) -> Any:  # type: ignore[override]  # the package's docstring, not this class's
        return self._ask("getattr", name="__doc__")

    def __dir__(self) -> list[str]:
        names = self._ask("dir")
        return [n for n in names if type(n) is str] if type(names) is list else []

    def _ask(self, op: str, **fields: Any) -> Any:
        link: Link = object.__getattribute__(self, "_link")
        sent = {k: _send(link, v) for k, v in fields.items()}
        return link.ask({"op": op, "ref": {"$": "ref", "id": object.__getattribute__(self, "_id")}, **sent})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name=name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", name=name, value=value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ask("call", args=list(args), kwargs=kwargs)

    def __getitem__(self, key: Any) -> Any:
        return self._ask("getitem", key=key)

    def __iter__(self) -> Any:
        return iter(self._ask("list"))

    def __len__(self) -> int:
        got = self._ask("len")
        if type(got) is not int:
            raise TypeError("len() of a remote object that is not an int")
        return got

    def __bool__(self) -> bool:
        return self._ask("bool") is True

    def __contains__(self, item: Any) -> bool:
        raise TypeError(f"a test asked whether a value is in {self!r}: {_OWN}")

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        raise TypeError(_opaque(self, other))

    def __ne__(self, other: object) -> bool:
        if other is self:
            return False
        raise TypeError(_opaque(self, other))

    def __hash__(self) -> int:
        raise TypeError(f"hash() of {self!r}: {_OWN}")

    def __repr__(self) -> str:
        return f"<{object.__getattribute__(self, '_name')} of the package under test>"


_OWN = (
    "only the package's own code (its __eq__, __hash__, __contains__) could answer, and it is not trusted to grade: "
    "compare plain values the object gives (its attributes, what its methods return), or use `is`"
)


def _opaque(remote: Remote, other: object) -> str:
    what = repr(other) if isinstance(other, Remote) else f"a value of type {type(other).__name__}"
    return f"the test compared {remote!r}, an opaque object of the package, with {what}: {_OWN}"


class RemoteModule(types.ModuleType):
    """A module of the package's process; its attributes are asked for there."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        remote = self.__dict__["__remote__"]
        return getattr(remote, name)

    def __dir__(self) -> list[str]:
        return dir(self.__dict__["__remote__"])


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import NAME`` (and ``NAME.sub``) for the package's top-level names gives a :class:`RemoteModule`."""

    def __init__(self, link: Link, names: set[str]) -> None:
        self.link, self.names = link, names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = RemoteModule(spec.name)
        try:
            module.__dict__["__remote__"] = self.link.ask({"op": "import", "name": spec.name})
        except ImportError as exc:
            raise ModuleNotFoundError(str(exc), name=spec.name) from None
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def remote_module(link: Link, name: str) -> RemoteModule:
    """The module ``name`` of ``link``'s process, not registered in sys.modules (the reference's, for a test
    that compares the package with it)."""
    module = RemoteModule(name)
    module.__dict__["__remote__"] = link.ask({"op": "import", "name": name})
    return module


def install(link: Link, names: set[str]) -> None:
    sys.meta_path.insert(0, Finder(link, names))
