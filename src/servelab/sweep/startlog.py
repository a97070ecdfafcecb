"""What an engine's start-up log says it did: the KV cache it allocated (through plan's own log reader, the one
``servelab plan --calibrate`` uses), the phases it timed, and whether its compiled graphs came from the cache.

vLLM says "saved AOT compiled function" or "Compiling a graph ... takes" on a cold start and "Directly load" (the
AOT function or the compiled graphs) on a cached one; llama.cpp compiles nothing (``none``). A log that says neither
is ``unknown``, never guessed.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from servelab.core.errors import ServelabError
from servelab.core.results.sweep import CacheState, PointLogged, PointStart
from servelab.plan import read_reported

_PHASES = {  # phase -> the line that times it (vLLM 0.25 on a GPU, vLLM 0.32 on the CPU)
    "weights load": re.compile(
        r"Loading weights took ([\d.]+) seconds|Model loading took [\d.]+ GiB(?: memory)? "
        r"and ([\d.]+) seconds"
    ),
    "torch.compile": re.compile(r"torch\.compile took ([\d.]+) s in total"),
    "graph compile": re.compile(r"Compiling a graph for compile range .* takes ([\d.]+) s"),
    "cache load": re.compile(r"Directly load the compiled graph\(s\) for compile range .* took ([\d.]+) s"),
    "profile / warm-up run": re.compile(r"Initial profiling/warmup run took ([\d.]+) s"),
    "CUDA graph capture": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    "init engine": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}
_COLD = re.compile(
    r"saved AOT compiled function|Compiling a graph for compile range|Compiling model again due to a load"
)
_CACHED = re.compile(r"Directly load AOT compilation|Directly load the compiled graph")
_SGLANG_KV = re.compile(r"KV Cache is allocated\. #tokens: (\d+)")
_LLAMACPP = "llama_kv_cache"


_STAMP = r"^(?:.*?(\d\d-\d\d \d\d:\d\d:\d\d))?"  # vLLM's MM-DD HH:MM:SS, where the line has one
_WHILE_MEASURED = (  # a line the engine wrote while measured that qualifies a figure taken then -> what it means
    (re.compile(_STAMP + r".*Triton kernel JIT compilation during inference: (\w+)"),
     "the engine JIT-compiled a Triton kernel ({1}) while measured{at}: the requests running then include the compile"),
    (re.compile(_STAMP + r".*(?:Compiling a graph for compile range|Compiling model again)"),
     "the engine compiled a graph while measured{at}: the requests running then include the compile"),
)  # fmt: skip


def log_size(path: Path) -> int:
    """Where the log ends now (what is written after this is the measurement's)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def while_measured(path: Path, since: int) -> list[str]:
    """What the engine's log said after byte ``since`` that qualifies the figures measured then, once per kind and
    kernel, with the first time it was said and how often. A line the mark cuts belongs to before it; a log that
    shrank (rotated or truncated) is read whole; lines are read one at a time, each cut at 4 KiB."""
    found: dict[str, list[str]] = {}
    spec: list[tuple[int, int]] = []
    try:
        with path.open("rb") as handle:
            if handle.seek(0, 2) < since:
                since = 0
            handle.seek(max(0, since - 1))
            if since and handle.read(1) != b"\n":
                handle.readline()  # the rest of a line written before the mark
            for raw in handle:
                line = raw[:4096].decode(errors="replace")
                spec += [(int(a), int(d)) for a, d in _SPEC.findall(line)]
                for pattern, meaning in _WHILE_MEASURED:
                    if m := pattern.search(line):
                        stamp, *rest = m.groups()
                        key = meaning.format("", *rest, at="")
                        said = meaning.format(stamp, *rest, at=f" at {stamp}" if stamp else "")
                        found.setdefault(key, []).append(said)
    except OSError:
        return []
    lines = [said[0] + (f" ({len(said)} times)" if len(said) > 1 else "") for said in found.values()]
    return lines + _acceptance(spec)


_SPEC = re.compile(r"SpecDecoding metrics: .*?Accepted: (\d+) tokens, Drafted: (\d+) tokens")


def _acceptance(counts: list[tuple[int, int]]) -> list[str]:
    """vLLM's speculative-decoding lines summed: the drafted tokens the target accepted in the intervals it logged
    (every ~10 s: the interval the stop cuts short is not logged; an engine that drafted nothing, as ngram on text
    with no repeats, logs no such line)."""
    accepted, drafted = sum(a for a, _ in counts), sum(d for _, d in counts)
    if not drafted:
        return []
    share = f"{accepted / drafted:.1%}"
    return [f"speculative decoding: {accepted:,} of {drafted:,} drafted tokens accepted ({share}) in vLLM's logged "
            "intervals while measured (warm-up included; the last interval is not logged)"]  # fmt: skip


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def logged(path: Path, engine: str) -> PointLogged:
    """The engine's own allocation from its log; ``error`` says why a figure is missing."""
    text = read_text(path)
    if engine == "sglang":
        found = _SGLANG_KV.findall(text)
        return PointLogged(kv_tokens=int(found[-1])) if found else PointLogged(error="no 'KV Cache is allocated' line")
    try:
        r = read_reported(str(path))
    except ServelabError as exc:
        return PointLogged(error=str(exc))
    except Exception as exc:  # a log the reader cannot place must not cost the sweep its measured points
        return PointLogged(error=f"the log could not be read ({type(exc).__name__}: {str(exc)[:200]})")
    return PointLogged(kv_tokens=r.tokens, kv_pool_bytes=r.available_bytes, weights_bytes=r.weights_bytes,
                       cudagraph_bytes=r.cudagraph_bytes, max_concurrency=r.max_concurrency,
                       context=r.max_model_len)  # fmt: skip


def start_facts(path: Path, seconds: float | None) -> PointStart:
    """The phases the log timed (the last of each: a log holds one start) and cold, cached, none or unknown."""
    text = read_text(path)
    phases = {}
    for name, pattern in _PHASES.items():
        found = pattern.findall(text)
        if found:
            last = found[-1]
            value = next((v for v in last if v), None) if isinstance(last, tuple) else last
            if value:
                with contextlib.suppress(ValueError):  # "1.2.3": no figure rather than a wrong one
                    phases[name] = float(value)
    return PointStart(seconds=seconds, cache=cache_state(text), phases=phases, log=str(path))


def cache_state(text: str) -> CacheState:
    """cold (compiled now), cached (loaded compiled graphs), none (llama.cpp compiles nothing), else unknown."""
    if _CACHED.search(text):
        return "cached"
    if _COLD.search(text):
        return "cold"
    if _LLAMACPP in text:
        return "none"
    return "unknown"
