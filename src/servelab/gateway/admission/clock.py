"""``strftime_now`` in a chat template: the engine renders at its own moment, so no one date's text is the count.

Rule: a render does not pick a date. Each ``strftime_now(fmt)`` call prints a marker; after the render each marker
becomes the text at :data:`REFERENCE` (the text the tokenizer reads) and a :class:`Span` that remembers its format
and the most UTF-8 bytes that format prints on any date (:func:`max_bytes`: the sum, over the format's directives,
of each directive's longest output over every day of a leap and a common year at the extreme hours, minutes,
seconds and years; a date's text is its directives' texts side by side, so this is at least any date's). The byte
bound counts each output at that maximum; the exact count bounds the tokens near each output by bytes
(:mod:`.regions`).

That holds only where the output is printed as text. A template that does anything else with it (compares it,
filters it, slices it, passes it to a macro, prints it where the template can read it back) could branch on the
date, so :func:`check_printed` refuses it at load:
the value of ``strftime_now(...)``, and of any name set from it, may only be printed (alone, joined with ``+`` or
``~``, or in a branch of an inline ``if``), stored into another such name, or tested with ``is defined``."""

from __future__ import annotations

import re
import secrets
from datetime import date, datetime, timedelta
from functools import cache, lru_cache
from typing import Any, NamedTuple

from servelab.gateway.admission.errors import Uncountable

REFERENCE = datetime(2023, 9, 27, 23, 59, 59, 999999)  # the date whose text stands in for the output
OPEN, CLOSE = "\ufdd0", "\ufdd1"  # Unicode noncharacters
DIRECTIVE = re.compile(r"%[-_0^#]*\d*[EO]?.|%$|[^%]+", re.DOTALL)
WIDE = re.compile(r"%[-_0^#]*\d{3}")


class Span(NamedTuple):
    start: int  # where the output lies in the render at REFERENCE (characters)
    end: int
    widest: int  # the most bytes its format prints on any date


class Clock:
    """One render's ``strftime_now``: each call prints a marker (a per-process nonce, so a request's own text cannot
    forge one) and remembers its format."""

    NONCE = secrets.token_hex(8)
    MARK = re.compile(f"{OPEN}{NONCE}(\\d+){CLOSE}")

    def __init__(self) -> None:
        self.formats: list[str] = []

    def __call__(self, fmt: Any) -> str:
        if not isinstance(fmt, str):
            raise Uncountable("strftime_now was given a format that is not a string")
        self.formats.append(fmt)
        return f"{OPEN}{self.NONCE}{len(self.formats) - 1}{CLOSE}"

    def resolve(self, text: str) -> tuple[str, tuple[Span, ...]]:
        """``text`` with every marker replaced by its output at :data:`REFERENCE`, and where each output lies."""
        if not self.formats:
            return text, ()
        pieces, spans, at, length = [], [], 0, 0
        for match in self.MARK.finditer(text):
            fmt = self.formats[int(match.group(1))]
            plain, output = text[at : match.start()], _strftime(REFERENCE, fmt)
            pieces += [plain, output]
            length += len(plain)
            spans.append(Span(length, length + len(output), max_bytes(fmt)))
            length, at = length + len(output), match.end()
        pieces.append(text[at:])
        out = "".join(pieces)
        if OPEN in out or len(spans) != text.count(OPEN):
            raise Uncountable("a strftime_now output was cut or the prompt holds the clock's marker (U+FDD0)")
        return out, tuple(spans)


def extra_bytes(spans: tuple[Span, ...], text: str) -> int:
    """How many more bytes the outputs may print on another date than at REFERENCE."""
    return sum(span.widest - len(text[span.start : span.end].encode()) for span in spans)


def _strftime(moment: datetime, fmt: str) -> str:
    try:
        return moment.strftime(fmt)
    except (ValueError, OverflowError):
        raise Uncountable("strftime_now was given a format it cannot print") from None


@lru_cache(maxsize=4096)
def max_bytes(fmt: str) -> int:
    """The most UTF-8 bytes ``datetime.strftime(fmt)`` prints on any date (a bound: directive by directive, where
    the C library prints the format as its directives side by side, checked on a few dates). A directive padded
    past 99 characters is :class:`Uncountable` (the walk over dates would cost too much)."""
    pieces = DIRECTIVE.findall(fmt)
    for moment in _moments()[::997]:
        if "".join(_strftime(moment, piece) for piece in pieces) != _strftime(moment, fmt):
            raise Uncountable("strftime_now was given a format the C library does not print directive by directive")
    return sum(_directive_bytes(piece) for piece in pieces)


@lru_cache(maxsize=4096)
def _directive_bytes(piece: str) -> int:
    if not piece.startswith("%"):
        return len(piece.encode("utf-8", "surrogatepass"))
    if WIDE.match(piece):
        raise Uncountable("strftime_now was given a directive padded past 99 characters")
    widest = 0
    for moment in _moments():
        try:
            widest = max(widest, len(moment.strftime(piece).encode("utf-8", "surrogatepass")))
        except (ValueError, OverflowError):
            continue
    return widest


@cache
def _moments() -> tuple[datetime, ...]:
    """Every day of a leap year (2000) and of 9999, the first day of year 1, each at the extreme times of day:
    every month and weekday name, every day of the year and week number, the widest numbers."""
    days = [date(2000, 1, 1) + timedelta(n) for n in range(366)] + [date(9999, 1, 1) + timedelta(n) for n in range(365)]
    days.append(date(1, 1, 1))
    times = [(h, m, m, us) for h in (0, 9, 10, 12, 13, 23) for m in (0, 59) for us in (0, 999999)]
    return tuple(datetime(d.year, d.month, d.day, h, m, s, us) for d in days for h, m, s, us in times)


# ---- the template may only print the clock's value ------------------------------------------------------------
def check_printed(nodes: Any, tree: Any) -> bool:
    """Whether every use of ``strftime_now``'s value in ``tree`` only prints it (see the module's rule)."""
    tainted: set[str] = set()
    while True:
        found = set(tainted)
        for node, parents in _walk(nodes, tree, ()):
            if not _is_source(nodes, node, tainted):
                if _is_name(nodes, node, "strftime_now") and not _probe_or_call(nodes, node, parents):
                    return False
                continue
            sink = _sink(nodes, node, parents)
            if sink is False:
                return False
            if isinstance(sink, str):
                found.add(sink)
        if found == tainted:
            return True
        tainted = found


def _walk(nodes: Any, node: Any, parents: tuple[Any, ...]) -> Any:
    yield node, parents
    for child in node.iter_child_nodes():
        yield from _walk(nodes, child, (*parents, node))


def _is_name(nodes: Any, node: Any, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.name == name and node.ctx == "load"


def _is_source(nodes: Any, node: Any, tainted: set[str]) -> bool:
    if isinstance(node, nodes.Call) and _is_name(nodes, node.node, "strftime_now"):
        return True
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name in tainted


def _probe_or_call(nodes: Any, node: Any, parents: tuple[Any, ...]) -> bool:
    parent = parents[-1]
    return (isinstance(parent, nodes.Call) and parent.node is node) or _is_defined_test(nodes, parent, node)


def _is_defined_test(nodes: Any, parent: Any, node: Any) -> bool:
    return isinstance(parent, nodes.Test) and parent.node is node and parent.name in ("defined", "undefined")


def _sink(nodes: Any, node: Any, parents: tuple[Any, ...]) -> bool | str:
    """Where a value of the clock ends: True (printed or probed), a name it is stored into, or False."""
    for depth in range(len(parents) - 1, -1, -1):
        parent = parents[depth]
        joined = isinstance(parent, nodes.Add | nodes.Concat)
        if joined or (isinstance(parent, nodes.CondExpr) and parent.test is not node):
            node = parent
            continue
        if isinstance(parent, nodes.Output):
            return _printed_into(nodes, parents[:depth])
        if isinstance(parent, nodes.Assign) and parent.node is node and isinstance(parent.target, nodes.Name):
            return str(parent.target.name)
        return _is_name(nodes, node, getattr(node, "name", "")) and _is_defined_test(nodes, parent, node)
    return False


def _printed_into(nodes: Any, parents: tuple[Any, ...]) -> bool | str:
    """Printed text goes to the prompt, or into a ``{% set x %}`` block (then ``x`` holds the clock's value). An
    allow-list: the output may sit only under the template, ``if`` branches and loops that are not recursive. Any
    other enclosing node can hand the printed text back to the template (a block read again through ``self``, a
    recursive loop's ``loop(...)``, a macro, a call or filter block), so it is refused."""
    for parent in reversed(parents):
        if isinstance(parent, nodes.AssignBlock):
            return str(parent.target.name) if isinstance(parent.target, nodes.Name) and parent.filter is None else False
        if isinstance(parent, nodes.For) and not parent.recursive:
            continue
        if not isinstance(parent, nodes.Template | nodes.If | nodes.Output):
            return False
    return True
