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
        self.fresh: list[int] = []  # numbered since the last message: their contents still to send
        self.why = ""  # why the last container that could not be sent could not

    def ref(self, value: Any, kind: type) -> dict[str, Any]:
        """The tag naming ``value`` on the wire (numbered here the first time it crosses)."""
        number = self.numbers.get(id(value))
        if number is None or self.objects.get(number) is not value:
            number, self.next = self.next, self.next + 2
            self._keep(number, value, kind)
            self.fresh.append(number)
        return {"$": "shared", "id": number}

    def resolve(self, tag: dict[str, Any]) -> Any:
        number = tag.get("id")
        if type(number) is not int or number not in self.objects:
            raise WireError("a shared container this side does not know")
        return self.objects[number]

    def changes(self, content: Callable[[Any, type], Any]) -> tuple[list[list[Any]], list[int]]:
        """What changed since the last message: ``[number, contents]`` (``[number, tail, "extend"]`` where a list
        only grew), nested ones met on the way included (each container once); and the numbers of containers that
        can no longer be sent (their contents no longer plain data, or changed while being read): forgotten here,
        for the other side to forget too. ``content(container, kind)`` encodes one container's items."""
        out: list[list[Any]] = []
        broken: list[int] = []
        taken: dict[int, tuple[tuple[Any, ...], ...]] = {}  # kept as seen once this message is built
        queue, self.fresh = [*self.objects, *self.fresh], []
        while queue:
            number = queue.pop()
            if number in taken or number not in self.objects:
                continue
            kind, value = self.kinds[number], self.objects[number]
            try:
                now, change = self._read(number, kind, value, content)
                if change is not None:
                    out.append(change)
                taken[number] = now
            except Exception as exc:  # not plain data any more
                broken.append(number)
                self.why = f"{type(exc).__name__}: {exc}"[:500]
            queue += self.fresh
            self.fresh = []
        self.seen.update(taken)
        self.forget(broken)
        return out, broken

    def _read(
        self, number: int, kind: type, value: Any, content: Callable[[Any, type], Any]
    ) -> tuple[Any, list[Any] | None]:
        """A container's snapshot and its change, read again where another thread changed it as it was read."""
        for attempt in range(3):
            try:
                now = snapshot(kind, value)
                before = self.seen.get(number)
                return now, None if same(now, before) else _change(number, kind, value, now, before, content)
            except RuntimeError:  # "changed size during iteration": a thread of the package's
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def apply(self, state: Any, decode: Callable[[Any], Any]) -> None:
        """Make this side's containers what the sender's ``changes`` say (new ones created first, so contents may
        name any of them); :class:`WireError` for anything else."""
        if type(state) is not list:
            raise WireError("shared state that is not a list")
        entries: list[tuple[int, Any, bool]] = []
        for item in state:
            grown = type(item) is list and len(item) == 3 and item[2] == "extend"
            if type(item) is not list or len(item) != 2 + grown or type(item[0]) is not int or item[0] < 0:
                raise WireError("a shared container without its number")
            number, content = item[0], item[1]
            if number not in self.objects:
                if number % 2 == self.parity or grown:
                    raise WireError("a new shared container numbered as this side's own, or only grown")
                made = empty(content)
                self._keep(number, made, type(made))
            entries.append((number, content, grown))
        for number, content, grown in entries:
            kind, target = self.kinds[number], self.objects[number]
            fresh = decode(content)
            if grown:
                if kind is not list or type(fresh) is not list:
                    raise WireError("a shared container grown that is not a list")
                list.extend(target, fresh)
            else:
                fill(kind, target, fresh)
            self.seen[number] = snapshot(kind, target)

    def unheld(self) -> list[int]:
        """Forget the containers nothing outside this table holds, cycles among them included (as a collector
        finds garbage: each one's references less those from the table's own containers and snapshots, then what
        the held ones reach); their numbers, for the other side to forget too."""
        counts = dict(_counts(self.objects))
        inner = dict.fromkeys(self.objects, 0)
        for number, value in self.objects.items():
            for item in (*_items(self.kinds[number], value), *_seen_items(self.seen.get(number))):
                if (other := self._number_of(item)) is not None:
                    inner[other] += 1
        held = [n for n in self.objects if counts[n] - _FLOOR - inner[n] > 0]
        reached = set(held)
        while held:
            number = held.pop()
            for item in _items(self.kinds[number], self.objects[number]):
                if (other := self._number_of(item)) is not None and other not in reached:
                    reached.add(other)
                    held.append(other)
        gone = [n for n in self.objects if n not in reached]
        self.forget(gone)
        return gone

    def _number_of(self, item: Any) -> int | None:
        number = self.numbers.get(id(item))
        return number if number is not None and self.objects.get(number) is item else None

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


def _change(
    number: int, kind: type, value: Any, now: Any, before: Any, content: Callable[[Any, type], Any]
) -> list[Any]:
    """A list that only grew since the last message sends its new items; anything else its whole contents."""
    if (
        kind is list
        and before is not None
        and len(now[0]) >= len(before[0])
        and same((now[0][: len(before[0])],), before)
    ):
        return [number, content(list(now[0][len(before[0]) :]), list), "extend"]
    return [number, content(value, kind)]


def _items(kind: type, value: Any) -> tuple[Any, ...]:
    """A container's items that could be containers (a dict's values; keys are hashable)."""
    if kind is list or kind is set:
        return tuple(kind.__iter__(value))
    view = collections.OrderedDict if kind is collections.OrderedDict else dict
    return tuple(view.values(value))


def _seen_items(snap: tuple[tuple[Any, ...], ...] | None) -> tuple[Any, ...]:
    """The references a snapshot holds (every part: items, keys, values, a factory)."""
    return tuple(item for part in snap for item in part) if snap else ()


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
