"""The configurations a sweep starts: axes of flag or environment values, and points given whole.

An axis is one engine flag with its values (``"--max-num-batched-tokens 512,1024"``, ``"-np 1,2"``), a bare switch
(``"--enforce-eager"``: left out, then given), or an environment variable (``"VLLM_CPU_KVCACHE_SPACE=1,2"``). Values
are split at commas outside quotes and brackets, so a JSON value keeps its own (``'--speculative-config -,{"method":
"ngram","num_speculative_tokens":15}'``); the value ``-`` leaves the flag out (the engine's default). A point given
whole (``--point "--max-num-seqs 4"``, leading ``NAME=VALUE`` words its environment) is crossed with every axis.
Each point's flags are exactly what the axes and points say, in their order: nothing is added to them.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from servelab.core.errors import UsageError
from servelab.plan import ENGINE_FLAGS, vllm_flag

LEAVE_OUT = "-"  # a value that leaves its flag out: the engine's default
SWITCH_ON = "on"
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLOSE = {"{": "}", "[": "]", "(": ")"}
# every spelling of a setting the engines' flag readers know, by the setting (-tp and --tensor-parallel-size, ...)
SETTING_OF = {flag: (dest, cast) for flags, _ in ENGINE_FLAGS.values() for flag, (dest, cast) in flags.items()}
SWITCH_OF = {flag: (dest, str(on)) for _, switches in ENGINE_FLAGS.values() for flag, (dest, on) in switches.items()}


@dataclass(frozen=True, slots=True)
class Axis:
    """One flag (or environment variable) and the values the sweep gives it."""

    name: str  # the flag as typed (--max-num-seqs, -np) or the variable's name
    values: tuple[str, ...]
    kind: str = "flag"  # flag, switch or env

    def words(self, value: str) -> tuple[str, ...]:
        """The command-line words one value of this axis adds (none for a value left out, or for an env axis)."""
        if self.kind == "env" or value == LEAVE_OUT:
            return ()
        return (self.name,) if self.kind == "switch" else (self.name, value)


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration: the engine flags and environment it starts with."""

    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # sorted (name, value) pairs

    @property
    def key(self) -> str:
        """The point as one line (its environment first, like a shell): what a resumed sweep matches points by."""
        words = [f"{k}={v}" for k, v in self.env] + list(self.args)
        return shlex.join(words) if words else "(the engine's defaults)"

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True, slots=True)
class Grid:
    axes: tuple[Axis, ...] = ()
    points: tuple[Point, ...] = field(default_factory=tuple)

    def expand(self) -> list[Point]:
        """Every given point (or the engine's defaults, when none is given) crossed with every axis, in order; the
        same configuration twice is kept once, however it is spelled (``--max_num_seqs 8``, ``--max-num-seqs=8``,
        ``-tp`` for ``--tensor-parallel-size``, ``08``): each engine start is a configuration of its own. A point
        that gives one setting twice is refused (the engine would take one of them, the store say both)."""
        bases = self.points or (Point(),)
        out: dict[tuple[object, ...], Point] = {}
        for base in bases:
            for values in itertools.product(*(a.values for a in self.axes)):
                point = _combine(base, self.axes, values)
                out.setdefault(settings(point), point)
        return list(out.values())


def settings(point: Point) -> tuple[object, ...]:
    """The configuration a point starts: its settings by what they set, each value as its engine's reader reads it."""
    pairs: list[tuple[str, str | None]] = []
    words, i = list(point.args), 0
    while i < len(words):
        flag, eq, inline = words[i].partition("=") if words[i].startswith("-") else ("", "", words[i])
        if not flag:
            pairs.append(("", inline))
            i += 1
            continue
        spelled = vllm_flag(flag)
        if spelled in SWITCH_OF and not eq:  # --enforce-eager and --no-enforce-eager: one setting, two values
            pairs.append(SWITCH_OF[spelled])
            i += 1
            continue
        setting, cast = SETTING_OF.get(spelled, (spelled, None))
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(words) and _is_value(words[i + 1]):
            value, i = words[i + 1], i + 2
        else:
            value, i = None, i + 1
        # a flag no engine reader knows keeps its value as written
        pairs.append((setting, value if value is None or cast is None else _as_read(value, cast)))
    read = {dest for dest, _ in SETTING_OF.values()} | {dest for dest, _ in SWITCH_OF.values()}
    named = [name for name, _ in pairs if name in read]  # a flag the engine takes many times (-ot) may repeat
    if twice := sorted({name for name in named if named.count(name) > 1}):
        raise UsageError(f"the point {point.key} gives {', '.join(twice)} twice",
                         hint="give each setting once (an axis and a --point may not both set it)")  # fmt: skip
    return tuple(sorted(pairs, key=lambda pair: (pair[0], str(pair[1])))), point.env


def _is_value(word: str) -> bool:
    return not word.startswith("-") or bool(re.fullmatch(r"-\d[\d.]*", word))


def _as_read(value: str, cast: Callable[[str], object]) -> str:
    """A read setting's value as its engine reads it (``32k`` and ``32000``, ``08`` and ``8`` are one value); one
    it cannot read, as written."""
    try:
        return repr(cast(value))
    except Exception:  # the engine's reader refuses it: the plan says so; here it is only a different value
        return value


def _combine(base: Point, axes: Sequence[Axis], values: Sequence[str]) -> Point:
    args, env = list(base.args), dict(base.env)
    for axis, value in zip(axes, values, strict=True):
        if axis.kind == "env":
            if value == LEAVE_OUT:
                env.pop(axis.name, None)
            else:
                env[axis.name] = value
        else:
            args += axis.words(value)
    return Point(tuple(args), tuple(sorted(env.items())))


def split_values(text: str, where: str) -> tuple[str, ...]:
    """``512,1024`` -> ('512', '1024'); commas inside quotes or brackets stay in their value (a value quoted whole
    is given without its quotes: ``'3,1','1,1'`` -> ('3,1', '1,1')); an empty value is refused."""
    values: list[str] = []
    current: list[str] = []
    stack: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in _CLOSE:
            stack.append(_CLOSE[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif ch == "," and not stack:
            values.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    if quote or stack:
        raise UsageError(f"{where}: {text!r} has an unclosed {quote or 'bracket'}")
    values.append("".join(current).strip())
    values = [v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'" else v for v in values]  # the quotes
    if any(not v for v in values):  # only protect the commas: the engine gets the value inside them
        raise UsageError(f"{where}: {text!r} has an empty value", hint="values are separated by single commas")
    return tuple(dict.fromkeys(values))


def parse_axis(text: str) -> Axis:
    """``--flag v1,v2`` / ``--flag=v1,v2`` / ``--switch`` / ``NAME=v1,v2`` as an axis; anything else is refused."""
    where = f"--grid {text!r}"
    stripped = text.strip()
    if not stripped:
        raise UsageError("--grid wants a flag and its values", hint='like --grid "--max-num-batched-tokens 512,1024"')
    head, _, rest = stripped.partition(" ")
    if not head.startswith("-"):
        name, eq, values = stripped.partition("=")
        if eq and _ENV.fullmatch(name.strip()):
            return Axis(name.strip(), split_values(values, where), "env")
        raise UsageError(
            f"{where}: an axis is an engine flag (starting with -) or an environment variable NAME=...",
            hint='like "--max-num-batched-tokens 512,1024", "-np 1,2" or "VLLM_CPU_KVCACHE_SPACE=1,2"',
        )
    flag, eq, inline = head.partition("=")
    raw = (inline + (" " + rest if rest else "")) if eq else rest
    if flag.strip("-") == "":
        raise UsageError(f"{where}: {flag!r} is not a flag")
    if not raw.strip():
        return Axis(flag, (LEAVE_OUT, SWITCH_ON), "switch")
    return Axis(flag, split_values(raw, where), "flag")


def parse_point(text: str) -> Point:
    """``"NAME=VALUE ... --flag value ..."``: leading NAME=VALUE words are the environment, the rest the flags."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--point {text!r} cannot be split into words: {exc}") from None
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words[0].partition("=")
        if not _ENV.fullmatch(name):
            break
        env[name] = value
        words.pop(0)
    if words and not words[0].startswith("-"):
        raise UsageError(f"--point {text!r}: {words[0]!r} is neither NAME=VALUE nor a flag",
                         hint="the model is given with --model; a point holds flags only")  # fmt: skip
    return Point(tuple(words), tuple(sorted(env.items())))


def make_grid(axes: Sequence[str], points: Sequence[str]) -> Grid:
    """The grid of the given axis and point texts; a flag or variable on two axes is refused."""
    parsed = tuple(parse_axis(a) for a in axes)
    seen: set[str] = set()
    for axis in parsed:
        if axis.name in seen:
            raise UsageError(f"--grid: {axis.name} is on two axes", hint="give all its values on one axis")
        seen.add(axis.name)
    return Grid(parsed, tuple(parse_point(p) for p in points))
