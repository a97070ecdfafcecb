"""The one Prometheus exposition parser: an engine's /metrics as samples (name, labels, value), summed per
series name or read as an info gauge's labels."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    labels: dict[str, str]
    value: float


def parse_exposition(text: str) -> list[MetricSample]:
    """Every sample; a malformed exposition is a ValueError (prometheus-client's own parser)."""
    return [
        MetricSample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def summed(samples: Iterable[MetricSample], prefixes: tuple[str, ...]) -> dict[str, float]:
    """Series whose names start with one of ``prefixes``, summed over their labels (histogram buckets and
    ``_created`` stamps left out)."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name.startswith(prefixes) and not s.name.endswith(("_bucket", "_created")) and not math.isnan(s.value):
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def info_labels(samples: Iterable[MetricSample], name: str) -> dict[str, str] | None:
    """The labels of an info-style gauge (``vllm:cache_config_info``), or None when the exposition has none."""
    return next((s.labels for s in samples if s.name == name), None)
