"""A byte bound on a chat template's output without rendering it, for templates simple enough to prove one.

Rendering costs ~25 us hot and ~100 us on a request that finds the CPU's caches cold (the common case at one
stream); this bound costs a few. It holds by construction for the templates it accepts, read once from their
syntax tree at load: the output is text from the template itself, fields of the messages, and the special-token
strings, emitted by ``{{ }}`` outputs of constants, names and ``message[...]`` look-ups joined with ``+`` or ``~``,
inside ``if`` blocks (any test: the bound takes every branch) and one loop over ``messages``. For such a template

    bytes(render) <= outside + len(messages) * per_message + sum over fields f: uses(f) * bytes(message[f])

where ``outside``/``per_message`` are the bytes of the constant text outside/inside the loop (every branch
counted) and ``uses(f)`` how many outputs in the loop name ``f``. A field's value that is not a string (a list,
a dict: it would print as its repr) gives no bound, and the caller renders. Any other construct (a filter, a
``set``, a macro, a nested loop, a call other than ``raise_exception``, which ends the render), a number constant,
a look-up of a name no converted message holds, or the output of a global makes the template one this module does
not bound (:func:`compile_bound` returns None)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# the keys a converted message may hold (admission.messages): a look-up of any other name is not bounded
MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_call_id", "task", "reasoning", "reasoning_content",
                          "tool_calls", "tools"})  # fmt: skip


class _NotAffine(Exception):
    pass


@dataclass
class AffineBound:
    outside: int = 0
    per_message: int = 0
    outside_fields: Counter[str] = field(default_factory=Counter)  # messages[i][f] outside the loop: any message
    uses: Counter[str] = field(default_factory=Counter)
    names: Counter[str] = field(default_factory=Counter)  # special-token strings and other context names
    names_per_message: Counter[str] = field(default_factory=Counter)  # the same, output inside the loop
    _names: tuple[tuple[str, int, int], ...] = ()
    _fields: tuple[tuple[str, int, int], ...] = ()

    def freeze(self) -> AffineBound:
        """Read once: the names and fields the bound looks up, with their counts, as tuples."""
        self._names = tuple((n, self.names[n], self.names_per_message[n]) for n in self.names | self.names_per_message)
        keys = self.uses | self.outside_fields
        self._fields = tuple((k, self.uses[k], self.outside_fields[k]) for k in keys)
        return self

    @property
    def reads_names(self) -> bool:
        return bool(self._names)

    def bytes(self, messages: list[dict[str, Any]], context: dict[str, Any]) -> int | None:
        """The bound for these messages (as the template is handed them) and context; None where a value it
        outputs is not a string."""
        count = len(messages)
        total = self.outside + self.per_message * count
        for name, outside, per_message in self._names:
            value = context.get(name, "")
            if not isinstance(value, str):
                return None
            total += (outside + per_message * count) * len(value.encode("utf-8", "surrogatepass"))
        for key, uses, outside in self._fields:
            whole = largest = 0
            for message in messages:
                value = message.get(key, "")
                if not isinstance(value, str):
                    return None
                size = len(value.encode("utf-8", "surrogatepass"))
                whole, largest = whole + size, max(largest, size)
            total += uses * whole + outside * largest
        return total


def compile_bound(env: Any, source: str) -> AffineBound | None:
    """The template's affine bound, or None when its syntax is outside what this module can bound."""
    from jinja2 import nodes

    bound = AffineBound()
    try:
        _walk(nodes, env.parse(source).body, bound, loop_var=None)
    except _NotAffine:
        return None
    if (bound.names | bound.names_per_message).keys() & set(env.globals):
        return None  # a global (range, raise_exception, ...) prints its repr, not a context string
    return bound.freeze()


def _walk(nodes: Any, body: list[Any], bound: AffineBound, loop_var: str | None) -> None:
    for node in body:
        if isinstance(node, nodes.Output):
            for piece in node.nodes:
                _output(nodes, piece, bound, loop_var)
        elif isinstance(node, nodes.If):
            _walk(nodes, node.body, bound, loop_var)
            for branch in node.elif_:
                _walk(nodes, branch.body, bound, loop_var)
            _walk(nodes, node.else_, bound, loop_var)
        elif isinstance(node, nodes.For) and loop_var is None and _is_name(nodes, node.iter, "messages"):
            if not isinstance(node.target, nodes.Name) or node.test is not None or node.recursive:
                raise _NotAffine
            _walk(nodes, node.body, bound, node.target.name)
            _walk(nodes, node.else_, bound, None)
        else:
            raise _NotAffine


def _output(nodes: Any, expr: Any, bound: AffineBound, loop_var: str | None) -> None:
    if isinstance(expr, nodes.Const) and not isinstance(expr.value, str):
        raise _NotAffine  # a number: ``+`` adds numbers, and its text is not the sum of its operands' texts
    if isinstance(expr, nodes.TemplateData | nodes.Const):
        size = len(str(expr.data if isinstance(expr, nodes.TemplateData) else expr.value).encode())
        if loop_var is None:
            bound.outside += size
        else:
            bound.per_message += size
    elif isinstance(expr, nodes.Add | nodes.Concat):
        for part in expr.nodes if isinstance(expr, nodes.Concat) else (expr.left, expr.right):
            _output(nodes, part, bound, loop_var)
    elif isinstance(expr, nodes.Getitem | nodes.Getattr):
        _field(nodes, expr, bound, loop_var)
    elif isinstance(expr, nodes.Name) and expr.name not in ("messages", loop_var, "loop"):
        (bound.names if loop_var is None else bound.names_per_message)[expr.name] += 1
    elif isinstance(expr, nodes.Call) and _is_name(nodes, expr.node, "raise_exception"):
        return  # ends the render: the engine refuses the request, nothing is prefilled
    else:
        raise _NotAffine


def _field(nodes: Any, expr: Any, bound: AffineBound, loop_var: str | None) -> None:
    """``message['f']`` / ``message.f`` in the loop, ``messages[i]['f']`` anywhere: the field's bytes."""
    key = expr.arg.value if isinstance(expr, nodes.Getitem) and isinstance(expr.arg, nodes.Const) else None
    key = expr.attr if isinstance(expr, nodes.Getattr) else key
    if key not in MESSAGE_KEYS:
        raise _NotAffine  # another name may be a dict's method (``message.items``): jinja prints its repr
    if loop_var is not None and _is_name(nodes, expr.node, loop_var):
        bound.uses[key] += 1
    elif isinstance(expr.node, nodes.Getitem) and _is_name(nodes, expr.node.node, "messages"):
        bound.outside_fields[key] += 1 if loop_var is None else 0
        if loop_var is not None:
            raise _NotAffine
    else:
        raise _NotAffine


def _is_name(nodes: Any, expr: Any, name: str) -> bool:
    return isinstance(expr, nodes.Name) and expr.name == name
