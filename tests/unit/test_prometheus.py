"""The one Prometheus parser on a vLLM-style exposition: sums per series over labels, buckets and _created left
out, an info gauge's labels read back; garbage is a ValueError."""

from __future__ import annotations

import pytest

from servelab.engines.prometheus import info_labels, parse_exposition, summed

EXPOSITION = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.7
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="9362",cache_dtype="auto"} 1.0
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
"""


def test_series_are_summed_over_labels_without_buckets() -> None:
    values = summed(parse_exposition(EXPOSITION), ("vllm:",))
    assert values["vllm:num_requests_running"] == 5.0
    assert values["vllm:time_to_first_token_seconds_count"] == 5.0
    assert not any(name.endswith("_bucket") for name in values) and "process_cpu_seconds_total" not in values


def test_an_info_gauge_gives_its_labels() -> None:
    samples = parse_exposition(EXPOSITION)
    assert info_labels(samples, "vllm:cache_config_info") == {
        "block_size": "16",
        "num_gpu_blocks": "9362",
        "cache_dtype": "auto",
    }
    assert info_labels(samples, "vllm:nothing_info") is None


def test_garbage_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_exposition("vllm:x{unclosed 1\n")
