"""The package's exceptions as the test process raises them (the package's process describes each one: its class's
lineage with each class's direct bases, its args, its attributes, its text, its cause and context).

The rules it keeps:
- A class is rebuilt with the direct bases it has in the package, multiple inheritance included, one class per
  module, qualified name and bases: ``OutOfStock(StockError, LookupError)`` is caught by ``pytest.raises`` of
  either base, and a ``StockError`` seen first never makes every later ``StockError`` a ``LookupError`` (nor the
  reverse), whatever the order the tests meet them in.
- Every class is built here on builtin exception classes, with no code of the package's, keeping what catches it:
  a ``BaseException`` that is no ``Exception`` stays one (``SystemExit``, ``GeneratorExit``, ``asyncio``'s
  ``CancelledError``; pytest reports it as a failure); ``KeyboardInterrupt`` alone arrives as ``BaseException``
  (it would stop pytest). A group arrives with its members.
- An instance gets the package's args, those of its attributes that are plain data (copies), the text the
  package's ``str()`` gave where its class has one of its own, and its cause and context two deep.

Standard library only; inside the sandbox this source follows _wire's in one ``python -c`` program.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable
from typing import Any

from servelab.eval.repair._wire import WireError  # servelab: inlined

MAX_LINEAGE = 64  # classes in one exception class's lineage
MAX_TEXT_CHARS = 10_000
TEXT_ATTR = "__servelab_text__"  # an instance's str() as the package gave it
STOPPING = frozenset({"KeyboardInterrupt", "GeneratorExit"})


class Errors:
    """The exception classes one link's package has raised or named, rebuilt once each."""

    def __init__(self) -> None:
        self.classes: dict[tuple[str, str, tuple[int, ...]], type[BaseException]] = {}
        self.keys: dict[Any, int] = {}  # a class's key as a small number (nested keys would hash in exponential time)

    def cls(self, mro: Any) -> type[BaseException]:
        """The class of this process for a lineage ``[[module, qualname, [base indices]], ...]`` (the package's
        MRO, each class with the places of its direct bases in it)."""
        entries = _checked(mro)
        built: list[type[BaseException] | None] = [None] * len(entries)
        numbers: list[int] = [0] * len(entries)
        for i in reversed(range(len(entries))):
            module, qualname, bases = entries[i]
            if module == "builtins":
                built[i], numbers[i] = builtin_error(qualname), self._number(("builtins", qualname))
                continue
            parents = list(dict.fromkeys(b for j in bases if (b := built[j]) is not None)) or [Exception]
            key = (module, qualname, tuple(numbers[j] for j in bases))
            numbers[i] = self._number(key)
            if key not in self.classes:
                self.classes[key] = _made(module, qualname, parents)
            built[i] = self.classes[key]
        return built[0] or Exception

    def _number(self, key: Any) -> int:
        return self.keys.setdefault(key, len(self.keys))

    def instance(self, described: Any, decode: Callable[[Any], Any], depth: int = 0) -> BaseException:
        """The exception a description names, with its args, attributes, text, cause and context."""
        if type(described) is not dict or depth > 2:
            raise WireError("an exception without its description")
        args = decode(described.get("args", []))
        members = described.get("members", [])
        if type(members) is not list:
            raise WireError("an exception group's members that are not a list")
        grouped = [self.instance(m, decode, depth + 1) for m in members]
        error = _exception(self.cls(described.get("mro")), args if type(args) is list else [], grouped)
        attrs = described.get("attrs", {})
        if type(attrs) is not dict:
            raise WireError("an exception's attributes that are not a map")
        for name, value in attrs.items():
            if attr_name(name):
                with contextlib.suppress(AttributeError, TypeError):  # a read-only attribute of a builtin class
                    setattr(error, name, decode(value))
        text = described.get("text")
        if type(text) is str and len(text) <= MAX_TEXT_CHARS and text != BaseException.__str__(error):
            error.__dict__[TEXT_ATTR] = text
        for key in ("cause", "context"):
            if key in described:
                setattr(error, f"__{key}__", self.instance(described[key], decode, depth + 1))
        error.__suppress_context__ = described.get("suppress") is True
        return error


def attr_name(name: Any) -> bool:
    """An attribute an exception may carry across: an identifier, not a dunder but ``__notes__``."""
    return type(name) is str and (name == "__notes__" or (name.isidentifier() and not name.startswith("__")))


def builtin_error(name: str) -> type[BaseException] | None:
    """A builtin exception class by name, ``KeyboardInterrupt`` as ``BaseException`` (it would stop pytest; as
    ``BaseException`` it is still no ``Exception``); None for anything else."""
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        return None
    return BaseException if issubclass(cls, KeyboardInterrupt) else cls


def _checked(mro: Any) -> list[tuple[str, str, list[int]]]:
    """The lineage, every base index pointing further along it (so no class is its own ancestor)."""
    if type(mro) is not list or not 0 < len(mro) <= MAX_LINEAGE:
        raise WireError("an exception class that is not a short lineage")
    out = []
    for i, entry in enumerate(mro):
        ok = type(entry) is list and len(entry) == 3 and all(type(s) is str for s in entry[:2])
        bases = entry[2] if ok else None
        if not ok or type(bases) is not list or not all(type(j) is int and i < j < len(mro) for j in bases):
            raise WireError("an exception class whose lineage is not names and later bases")
        out.append((entry[0][:200], entry[1][:200], bases))
    return out


def _made(module: str, qualname: str, parents: list[type[BaseException]]) -> type[BaseException]:
    """A class named as the package's, on ``parents`` (the first alone where Python refuses the combination)."""
    space = {"__module__": module, "__qualname__": qualname, "__str__": _text}
    name = qualname.rpartition(".")[2] or "Error"
    try:
        return type(name, tuple(parents), space)
    except TypeError:
        return type(name, (parents[0],), space)


def _text(self: BaseException) -> str:
    """The package's text where it gave one, else what the nearest builtin class makes of the args."""
    text = self.__dict__.get(TEXT_ATTR)
    if type(text) is str:
        return text
    own = next(vars(c)["__str__"] for c in type(self).__mro__ if vars(c).get("__str__", _text) is not _text)
    return str(own(self))


def _exception(cls: type[BaseException], args: list[Any], members: list[BaseException]) -> BaseException:
    """``cls(*args)`` (a group: ``cls(message, members)``), or an instance with those args where the class wants
    others (UnicodeDecodeError); where even that fails, an ``Exception`` with the args: what the package raised
    honestly is never taken for tampering."""
    try:
        if issubclass(cls, BaseExceptionGroup):
            return cls(str(args[0]) if args else "", members)
        return cls(*args)
    except Exception:
        try:
            error = cls.__new__(cls)
        except Exception:
            error = Exception()
        error.args = tuple(args)
        return error
