"""A checkpoint folder is the user's, and may be anybody's: whatever its quantization_config or its safetensors
headers say, the plan's weights are a positive figure the format allows, or the file is refused by name. Once a
gptq ``bits: -4`` planned -1.2 GiB of weights ("fits"), a header's offsets -931k GiB, and a garbage file raised."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.core.errors import UsageError
from servelab.plan import resolve_model, spec_from_config
from servelab.plan.quant import estimate_weights
from servelab.plan.resolve import safetensors_bytes

LLAMA = Path(__file__).resolve().parents[3] / "benchmarks/gpu/models/llama-3.1-8b/config.json"


def _folder(tmp_path: Path, quantization: Any) -> Path:
    config = json.loads(LLAMA.read_text()) | {"quantization_config": quantization}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize(
    "quantization",
    [
        {"quant_method": "gptq", "bits": -4},
        {"quant_method": "awq", "bits": 4, "group_size": "big"},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": -8}}}},
        {"quant_method": "compressed-tensors",
         "config_groups": {"g": {"weights": {"num_bits": 8, "strategy": "block", "block_structure": [0, 1]}}}},
        {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": -3},
        "fp8",
        ["fp8"],
    ],
)  # fmt: skip
def test_a_quantization_no_checkpoint_has_is_refused(tmp_path: Path, quantization: Any) -> None:
    with pytest.raises(UsageError, match="quantization_config"):
        resolve_model(str(_folder(tmp_path, quantization)))


VALUES = st.one_of(st.integers(-(2**40), 2**40), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                   st.none(), st.booleans(), st.lists(st.integers(-4, 300), max_size=3))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from(["gptq", "awq", "compressed-tensors", "modelopt", "fp8", "bitsandbytes"]),
    fields=st.dictionaries(
        st.sampled_from(["bits", "w_bit", "group_size", "q_group_size", "num_bits", "strategy", "type",
                         "block_structure", "quant_algo", "weight_block_size", "sym", "zero_point"]),
        VALUES, max_size=5),
)  # fmt: skip
def test_any_quantization_config_gives_positive_weights_or_a_clear_error(method: str, fields: dict[str, Any]) -> None:
    quantization: dict[str, Any] = {"quant_method": method, **fields}
    if method == "compressed-tensors":
        quantization = {"quant_method": method, "config_groups": {"g": {"weights": fields}}}
    if method == "modelopt":
        quantization.setdefault("quant_algo", "NVFP4")
    config = json.loads(LLAMA.read_text()) | {"quantization_config": quantization}
    try:
        spec = spec_from_config(config, name="hostile")
        assert spec.quantization is not None
        weights = estimate_weights(spec, spec.quantization)
    except UsageError:
        return
    assert 0 < weights.bytes < 4.5 * spec.total_params


def _safetensors(path: Path, header: Any, data: bytes = b"", length: int | None = None) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)


@pytest.mark.parametrize(
    ("header", "data", "length"),
    [
        ({"w": {"dtype": "F16", "shape": [2], "data_offsets": [10**12, 0]}}, b"\0" * 4, None),
        ({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 10**18]}}, b"\0" * 4, None),
        ({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, "4"]}}, b"\0" * 4, None),
        ({"w": {"dtype": "F16", "shape": [2]}}, b"\0" * 4, None),
        (["not", "an", "object"], b"", None),
        ({"w": {"data_offsets": [0, 4]}}, b"\0" * 4, 2**62),  # a header length that would try to read 4 EiB
        ({f"t{i}": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]} for i in range(40)}, b"\0" * 4, None),
    ],
)
def test_a_safetensors_header_that_breaks_the_format_is_refused(
    tmp_path: Path, header: Any, data: bytes, length: int | None
) -> None:
    _safetensors(tmp_path / "model.safetensors", header, data, length)
    with pytest.raises(UsageError, match=r"model\.safetensors: not a safetensors file"):
        safetensors_bytes(tmp_path)


def test_garbage_and_short_files_are_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(UsageError, match=r"model\.safetensors"):
        safetensors_bytes(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(UsageError, match=r"model\.safetensors"):
        safetensors_bytes(tmp_path)


def test_a_well_formed_header_is_summed_exactly(tmp_path: Path) -> None:
    header = {"__metadata__": {"format": "pt"}, "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
              "b": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]}}  # fmt: skip
    _safetensors(tmp_path / "model.safetensors", header, b"\0" * 16)
    assert safetensors_bytes(tmp_path) == 16
