"""Mutable containers shared by the test process and the package's process, so that aliasing is graded as it
happens in one process: a ``list``, ``dict``, ``set``, ``Counter``, ``OrderedDict`` or ``defaultdict`` that
crosses between them is one object on each side (a number names it on the wire), and every message carries the
contents of each such container that changed since the last message, applied in place before anything else in it
is read. A result the test appends to changes the package's list where the package handed out its own; a list
the package sorts in place is sorted in the test; ``cart.items() is cart.items()`` holds where the package returns
the same list twice, and a list handed in and returned is the test's own.

The rules it keeps:
- Between two messages only one process runs (the package's only while it answers a request), and at each message
  the receiver's shared containers are made equal to the sender's: contents in place, nested containers by their
  numbers, so identity holds at every depth (a list holding itself included).
- A receiver creates a container only for a number of the sender's own numbering (the test process numbers its
  containers even, the package's process odd) and changes only containers that crossed this link; whatever comes
  in is decoded by :func:`._wire.decode`, so the test process still gets only its own plain types.
- The test process forgets a container once nothing but this table holds it (its reference count) and says so in
  its next request; the package's process then forgets it too. So each message costs what the test still holds.

Standard library only; inside the sandbox this source follows _wire's in one ``python -c`` program.
"""

from __future__ import annotations

import collections
import operator
import sys
from collections.abc import Callable
from typing import Any

from servelab.eval.repair._wire import FACTORIES, WireError  # servelab: inlined

_EMPTY: dict[str, type] = {"set": set, "dict": dict, "Counter": collections.Counter,
                           "OrderedDict": collections.OrderedDict}  # fmt: skip


class Shared:
    """One side's table of the containers shared over one link."""

    def __init__(self, parity: int) -> None:
        self.parity = parity  # this side numbers its own containers n with n % 2 == parity
        self.next = parity
        self.objects: dict[int, Any] = {}  # number -> the container
        self.kinds: dict[int, type] = {}  # number -> the plain type it is read and written as
        self.seen: dict[int, tuple[tuple[Any, ...], ...]] = {}  # number -> its snapshot at the last message
        self.numbers: dict[int, int] = {}  # id(container) -> number

    def ref(self, value: Any, kind: type) -> dict[str, Any]:
        """The tag naming ``value`` on the wire (numbered here the first time it crosses)."""
        number = self.numbers.get(id(value))
        if number is None or self.objects.get(number) is not value:
            number, self.next = self.next, self.next + 2
            self._keep(number, value, kind)
        return {"$": "shared", "id": number}

    def resolve(self, tag: dict[str, Any]) -> Any:
        number = tag.get("id")
        if type(number) is not int or number not in self.objects:
            raise WireError("a shared container this side does not know")
        return self.objects[number]

    def changes(self, content: Callable[[Any, type], Any]) -> list[list[Any]]:
        """``[number, contents]`` of every container whose contents changed since the last message (or that never
        crossed), nested ones met on the way included; ``content(container, kind)`` encodes one container."""
        out: list[list[Any]] = []
        taken: dict[int, tuple[tuple[Any, ...], ...]] = {}  # kept as seen only once every one is encoded
        while len(taken) < len(self.objects):
            for number in [n for n in self.objects if n not in taken]:
                taken[number] = snapshot(self.kinds[number], self.objects[number])
                if not same(taken[number], self.seen.get(number)):
                    out.append([number, content(self.objects[number], self.kinds[number])])
        self.seen.update(taken)
        return out

    def apply(self, state: Any, decode: Callable[[Any], Any]) -> None:
        """Make this side's containers what the sender's ``changes`` say (new ones created first, so contents may
        name any of them); :class:`WireError` for anything else."""
        if type(state) is not list:
            raise WireError("shared state that is not a list")
        entries: list[tuple[int, Any]] = []
        for item in state:
            if type(item) is not list or len(item) != 2 or type(item[0]) is not int or item[0] < 0:
                raise WireError("a shared container without its number")
            number, content = item
            if number not in self.objects:
                if number % 2 == self.parity:
                    raise WireError("a new shared container numbered as this side's own")
                made = empty(content)
                self._keep(number, made, type(made))
            entries.append((number, content))
        for number, content in entries:
            fill(self.kinds[number], self.objects[number], decode(content))
            self.seen[number] = snapshot(self.kinds[number], self.objects[number])

    def unheld(self) -> list[int]:
        """Forget the containers nothing but this table holds; their numbers, for the other side to forget too."""
        gone = [n for n, count in _counts(self.objects) if count <= _FLOOR]
        self.forget(gone)
        return gone

    def forget(self, numbers: Any) -> None:
        if type(numbers) is not list:
            raise WireError("numbers to forget that are not a list")
        for number in numbers:
            value = self.objects.pop(number, None) if type(number) is int else None
            if value is not None:
                self.numbers.pop(id(value), None)
                self.kinds.pop(number, None)
                self.seen.pop(number, None)

    def _keep(self, number: int, value: Any, kind: type) -> None:
        self.objects[number], self.kinds[number], self.numbers[id(value)] = value, kind, number


def _counts(objects: dict[int, Any]) -> list[tuple[int, int]]:
    return [(n, sys.getrefcount(value)) for n, value in objects.items()]


_FLOOR = _counts({0: []})[0][1]  # the count of a container held by the table alone


def snapshot(kind: type, value: Any) -> tuple[tuple[Any, ...], ...]:
    """What a change is told by: the items (keys and values) as they are, and a defaultdict's factory."""
    if kind is list or kind is set:
        return (tuple(kind.__iter__(value)),)
    view = collections.OrderedDict if kind is collections.OrderedDict else dict
    parts = (tuple(view.keys(value)), tuple(view.values(value)))
    if kind is collections.defaultdict:
        return (*parts, (vars(collections.defaultdict)["default_factory"].__get__(value),))
    return parts


def same(now: tuple[tuple[Any, ...], ...], before: tuple[tuple[Any, ...], ...] | None) -> bool:
    """The same objects in the same places (identity: an equal value put in is a change, sent again harmlessly)."""
    if before is None or len(now) != len(before):
        return False
    return all(len(a) == len(b) and all(map(operator.is_, a, b)) for a, b in zip(now, before, strict=True))


def empty(content: Any) -> Any:
    """A new empty container of the kind ``content`` (as :func:`._wire.encode` writes one) is."""
    if type(content) is list:
        return []
    tag = content.get("$") if type(content) is dict else None
    if tag in _EMPTY:
        return _EMPTY[tag]()
    if tag == "defaultdict":
        factory = content.get("factory")
        if factory is not None and (type(factory) is not str or factory not in FACTORIES):
            raise WireError("a defaultdict whose factory is not a plain type")
        return collections.defaultdict(FACTORIES[factory] if factory else None)
    raise WireError("a shared container of no mutable kind")


def fill(kind: Any, target: Any, fresh: Any) -> None:
    """``target``'s contents made ``fresh``'s, in place, with ``kind``'s own methods (never its class's)."""
    if type(fresh) is not kind:
        raise WireError(f"a shared {kind.__name__} sent as a {type(fresh).__name__}")
    if kind is list:
        list.__setitem__(target, slice(None), fresh)
    elif kind is set:
        set.clear(target)
        set.update(target, fresh)
    elif kind is collections.OrderedDict:
        collections.OrderedDict.clear(target)
        for key, item in fresh.items():
            collections.OrderedDict.__setitem__(target, key, item)
    else:
        dict.clear(target)
        dict.update(target, fresh)
        if kind is collections.defaultdict:
            vars(collections.defaultdict)["default_factory"].__set__(target, fresh.default_factory)
