"""The sink's stamps in a stream's text: ``RECV:SENT SENT SENT ...`` (perf_counter_ns)."""

from __future__ import annotations


def parse(text: str) -> tuple[int, list[int]]:
    """(when the sink had read the request, when it sent each chunk)."""
    words = text.split()
    recv, _, first = words[0].partition(":")
    return int(recv), [int(first), *(int(w) for w in words[1:])]
