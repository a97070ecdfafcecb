"""The user's real engine flags (``--engine-args "..."``, or a start-up log's "non-default args").

Every flag that changes memory is read; the rest are kept verbatim, so the command line a plan
prints is the user's own, completed with what the plan decided. vLLM, SGLang and llama.cpp each
have their own spellings of the same settings.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from typing import Any

from servelab.core.errors import UsageError
from servelab.plan.flag_text import human_int, json_object
from servelab.plan.vllm_runtime import (
    DERIVED,
    VLLM_RUNTIME,
    RuntimeReader,
    log_runtime_tokens,
    runtime_from_log,
    speculative_method,
    vllm_flag,
)


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """What an engine's own flags say about memory; None: not given (the engine's default)."""

    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    mamba_ssm_cache_dtype: str | None = None
    mamba_cache_dtype: str | None = None
    tensor_parallel_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    quantization: str | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    disable_hybrid_kv_cache_manager: bool | None = None
    hf_overrides: str | None = None  # vLLM's --hf-overrides, as canonical JSON (a JSON object)
    speculative_method: str | None = None  # vLLM's --speculative-config: its method
    num_speculative_tokens: int | None = None  # --speculative-config's num_speculative_tokens
    speculative_model: str | None = None  # --speculative-config's draft model (a folder or hub id)
    load_format: str | None = None  # --load-format (dummy: nothing loaded, a draft shares the target's head)
    parallel_drafting: bool | None = None  # --speculative-config's parallel_drafting
    draft_probabilistic: bool | None = None  # --speculative-config's draft_sample_method is "probabilistic"
    optimization_level: int | None = None  # -O / --optimization-level
    cudagraph_mode: str | None = None  # -cc.cudagraph_mode / --compilation-config's
    compilation_mode: int | None = None  # -cc.mode (0 none, 1 stock torch.compile, 2 trace once, 3 vLLM's)
    max_cudagraph_capture_size: int | None = None  # --max-cudagraph-capture-size / -cc's
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # --cudagraph-capture-sizes / -cc's
    enable_lora: bool | None = None
    performance_mode: str | None = None
    v2_blockers: tuple[str, ...] | None = None  # flags on that vLLM's V2 model runner lacks
    use_v2_model_runner: bool | None = None  # VLLM_USE_V2_MODEL_RUNNER before `vllm serve`
    estimate_cudagraphs: bool | None = None  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    torch_compile_disable: bool | None = None  # TORCH_COMPILE_DISABLE=1
    ubatch: int | None = None  # llama-server's -ub
    gpu_layers: str | None = None  # llama-server's -ngl (a count, auto or all)
    cache_type_v: str | None = None  # llama-server's -ctv
    swa_full: bool | None = None  # llama-server's --swa-full
    kv_unified: bool | None = None  # llama-server's --kv-unified
    model: str | None = None
    tokens: tuple[str, ...] = field(default=(), compare=False)  # the flags as given, for the command line
    flags_given: tuple[str, ...] = field(default=(), compare=False)  # spellings of the settings they set

    def given(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("tokens", "flags_given")
                and getattr(self, f.name) is not None}  # fmt: skip

    def completed(self, additions: list[tuple[str, str | None]]) -> list[str]:
        """The user's flags, then each addition whose setting they did not give (value None: a switch)."""
        out = list(self.tokens)
        for flag, value in additions:
            if flag in self.flags_given:
                continue
            out += [flag] if value is None else [flag, value]
        return out

    def config_overrides(self) -> dict[str, Any]:
        """What --hf-overrides puts over the checkpoint's config.json ({} when not given)."""
        return dict(json.loads(self.hf_overrides)) if self.hf_overrides else {}


Setting = tuple[str, Callable[[str], Any]]
_SWITCH = "__switch__"

VLLM_FLAGS: dict[str, Setting] = {
    "--model": ("model", str),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--max-model-len": ("max_model_len", human_int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", human_int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--block-size": ("block_size", int),
    "--mamba-ssm-cache-dtype": ("mamba_ssm_cache_dtype", str),
    "--mamba-cache-dtype": ("mamba_cache_dtype", str),
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", human_int),
    "--kv-cache-memory": ("kv_cache_memory_bytes", human_int),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
    "--hf-overrides": ("hf_overrides", json_object),
    "--load-format": ("load_format", str),
    "--speculative-config": ("speculative_method", speculative_method),
    "-sc": ("speculative_method", speculative_method),
}
VLLM_SWITCHES: dict[str, tuple[str, bool]] = {
    "--enforce-eager": ("enforce_eager", True),
    "--no-enforce-eager": ("enforce_eager", False),
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
    "--enable-chunked-prefill": ("enable_chunked_prefill", True),
    "--no-enable-chunked-prefill": ("enable_chunked_prefill", False),
    "--disable-hybrid-kv-cache-manager": ("disable_hybrid_kv_cache_manager", True),
    "--no-disable-hybrid-kv-cache-manager": ("disable_hybrid_kv_cache_manager", False),
}
SGLANG_FLAGS: dict[str, Setting] = {
    "--model-path": ("model", str),
    "--model": ("model", str),
    "--mem-fraction-static": ("gpu_memory_utilization", float),
    "--context-length": ("max_model_len", int),
    "--max-running-requests": ("max_num_seqs", int),
    "--chunked-prefill-size": ("max_num_batched_tokens", int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--page-size": ("block_size", int),
    "--tp-size": ("tensor_parallel_size", int),
    "--tp": ("tensor_parallel_size", int),
    "--quantization": ("quantization", str),
    "--speculative-draft-model-path": ("speculative_model", str),
}
SGLANG_SWITCHES: dict[str, tuple[str, bool]] = {"--disable-cuda-graph": ("enforce_eager", True)}
LLAMACPP_FLAGS: dict[str, Setting] = {
    "-c": ("max_model_len", int),
    "--ctx-size": ("max_model_len", int),
    "-np": ("max_num_seqs", int),
    "--parallel": ("max_num_seqs", int),
    "-b": ("max_num_batched_tokens", int),
    "--batch-size": ("max_num_batched_tokens", int),
    "-ctk": ("kv_cache_dtype", str),
    "--cache-type-k": ("kv_cache_dtype", str),
    "-md": ("speculative_model", str),
    "--model-draft": ("speculative_model", str),
    "-ub": ("ubatch", int),
    "--ubatch-size": ("ubatch", int),
    "-ngl": ("gpu_layers", str),
    "--gpu-layers": ("gpu_layers", str),
    "--n-gpu-layers": ("gpu_layers", str),
    "-ctv": ("cache_type_v", str),
    "--cache-type-v": ("cache_type_v", str),
}
LLAMACPP_SWITCHES: dict[str, tuple[str, bool]] = {
    "--swa-full": ("swa_full", True),
    "-kvu": ("kv_unified", True),
    "--kv-unified": ("kv_unified", True),
    "--no-kv-unified": ("kv_unified", False),
}
# llama-server's own words for "absent": -c 0 (the model's context), -np -1 (automatic slots)
LLAMACPP_ABSENT = {("-c", "0"), ("--ctx-size", "0"), ("-np", "-1"), ("--parallel", "-1")}
ENGINES = {
    "vllm": (VLLM_FLAGS, VLLM_SWITCHES),
    "vllm-cpu": (VLLM_FLAGS, VLLM_SWITCHES),
    "sglang": (SGLANG_FLAGS, SGLANG_SWITCHES),
    "llamacpp": (LLAMACPP_FLAGS, LLAMACPP_SWITCHES),
}
_DEST_FLAGS = {dest: flag for flag, (dest, _) in VLLM_FLAGS.items() if flag.startswith("--")}


# the values an engine accepts for the settings that change memory (it refuses the rest at start)
RANGES: dict[str, tuple[float, float]] = {
    "gpu_memory_utilization": (1e-6, 1.0), "max_model_len": (1, 1 << 34), "max_num_seqs": (1, 1 << 24),
    "max_num_batched_tokens": (1, 1 << 34), "block_size": (1, 1 << 16), "tensor_parallel_size": (1, 1 << 12),
    "kv_cache_memory_bytes": (0, 1 << 50), "ubatch": (1, 1 << 24),
}  # fmt: skip


def out_of_range(dest: str, value: Any) -> str | None:
    """Why ``value`` cannot be the engine's ``dest`` (not finite, not whole, or outside what it accepts)."""
    if dest not in RANGES or value is None:
        return None
    low, high = RANGES[dest]
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    whole = dest == "gpu_memory_utilization" or (number and float(value).is_integer())
    if not number or not whole or not low <= value <= high:
        kind = "a number" if dest == "gpu_memory_utilization" else "a whole number"
        return f"{value!r} is not {kind} from {low:g} to {high:,g}"
    return None


def _take(values: dict[str, Any], dest: str, cast: Callable[[str], Any], raw: str, flag: str) -> None:
    try:
        values[dest] = cast(raw)
    except (UsageError, ValueError, OverflowError) as exc:
        raise UsageError(f"--engine-args: {flag} {raw!r}: {exc}") from None
    if why := out_of_range(dest, values[dest]):
        raise UsageError(f"--engine-args: {flag}: {why}")


# vLLM flags that change what a GPU holds in ways the plan does not model, refused unless at their default
# (by their argparse name, as a log lists them): their flags, their default, what they change
UNMODELLED: dict[str, tuple[tuple[str, ...], int, str]] = {
    "pipeline_parallel_size": (("--pipeline-parallel-size", "-pp"), 1,
                               "pipeline parallelism (the layers split over GPUs)"),
    "cpu_offload_gb": (("--cpu-offload-gb",), 0, "weights offloaded to the host"),
    "kv_offloading_size": (("--kv-offloading-size",), 0, "the KV cache offloaded to the host"),
}  # fmt: skip
VLLM_UNMODELLED = {flag: (default, what) for flags, default, what in UNMODELLED.values() for flag in flags}


@functools.cache
def vllm_flags() -> frozenset[str]:
    """vLLM 0.25.1's own flags (plan/vllm_flags.json, read from its source): a flag among them is never taken
    for a misspelling, whatever it resembles."""
    data = json.loads((resources.files("servelab.plan") / "vllm_flags.json").read_text())
    return frozenset(data["flags"])


def _check_unread(flag: str, value: str, switches: dict[str, Any], flags: dict[str, Any]) -> None:
    """A vLLM flag the plan does not read: refused where it changes the GPU's share unmodelled, or where it is a
    misspelling of one the plan reads (vLLM would refuse to start: the plan would be of another command)."""
    if flag in VLLM_UNMODELLED:
        default, what = VLLM_UNMODELLED[flag]
        if value.strip() not in (str(default), f"{default}.0"):
            raise UsageError(
                f"--engine-args: {flag} {value}: {what} is not modelled",
                hint=f"plan without {flag}, or with tensor parallelism (--tensor-parallel-size)",
            )
        return
    if not flag.startswith("--") or flag in vllm_flags():
        return
    read = [f for f in (*flags, *switches, *VLLM_RUNTIME) if f.startswith("--")]
    close = difflib.get_close_matches(flag, read, n=1, cutoff=0.85)
    if close and close[0] != flag:
        raise UsageError(f"--engine-args: {flag} is not a vLLM flag: did you mean {close[0]}? (vLLM would refuse "
                         "to start)")  # fmt: skip


def _int_text(raw: str) -> str:
    """``00`` and ``-01`` as llama-server reads them (``0``, ``-1``); anything else as written."""
    return str(int(raw)) if re.fullmatch(r"-?\d+", raw) else raw


_MODULES = ("vllm.entrypoints.openai.api_server", "sglang.launch_server")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def _past_launcher(tokens: list[str]) -> list[str]:
    """The flags past the engine's own launcher words, however it is reached: ``vllm serve``, ``llama-server`` or
    ``python -m <server module>``, by a path (``/opt/venv/bin/vllm``, ``./build/bin/llama-server``, ``python3.12``)
    or behind ``uv run``."""
    words = list(tokens)
    if words[:2] == ["uv", "run"]:
        words = words[2:]
    head = words[0].rsplit("/", 1)[-1] if words else ""
    if head == "vllm" and words[1:2] == ["serve"]:
        return words[2:]
    if head == "llama-server":
        return words[1:]
    if _PYTHON.fullmatch(head) and words[1:2] == ["-m"] and words[2:3] and words[2] in _MODULES:
        return words[3:]
    return tokens


def parse_engine_args(text: str, engine: str = "vllm") -> EngineArgs:
    """Read a quoted flag string (``"vllm serve M --max-model-len 32k -tp 2 ..."`` or just the flags; environment
    assignments before ``vllm serve`` are read too)."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--engine-args cannot be split into flags: {exc}") from None
    flags, switches = ENGINES.get(engine, ENGINES["vllm"])
    is_vllm = flags is VLLM_FLAGS
    runtime = RuntimeReader()
    tokens = runtime.read_env(tokens)
    tokens = _past_launcher(tokens)
    values: dict[str, Any] = {}
    given: list[str] = []
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        token = vllm_flag(tokens[i]) if is_vllm else tokens[i]
        flag, eq, inline = token.partition("=") if token.startswith("-") else (token, "", "")
        if not token.startswith("-"):
            if not kept:  # the first positional is the model
                values["model"] = token
            kept.append(token)
            i += 1
            continue
        if is_vllm and (after := runtime.take(tokens, i, kept)) is not None:
            i = after
            continue
        if flag in switches and not eq:
            dest, on = switches[flag]
            values[dest] = on
            given += [f for f, (d, _) in switches.items() if d == dest]
            kept.append(tokens[i])
            i += 1
            continue
        if flag in flags:
            dest, cast = flags[flag]
            raw = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if not raw:
                raise UsageError(f"--engine-args: {flag} needs a value")
            if engine != "llamacpp" or (flag, _int_text(raw)) not in LLAMACPP_ABSENT:
                _take(values, dest, cast, raw, flag)
            given += [f for f, (d, _) in flags.items() if d == dest]
            kept += [tokens[i]] if eq else [tokens[i], raw]
            i += 1 if eq else 2
            continue
        if is_vllm:
            _check_unread(flag, inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else ""), switches, flags)
        kept.append(tokens[i])  # a flag servelab does not read: kept for the command line
        i += 1
    if is_vllm:
        runtime.apply(values)
        given += [f for f, (d, _) in flags.items() if d == "speculative_method"] if runtime.speculative_given else []
    return EngineArgs(**values, tokens=tuple(kept), flags_given=tuple(given))


_LOG_ARGS = re.compile(r"non-default args: (\{.*\})")


def engine_args_from_log(text: str) -> EngineArgs | None:
    """vLLM's start-up line ``non-default args: {...}`` (argparse names) as EngineArgs."""
    found = _LOG_ARGS.findall(text)
    if not found:
        return None
    try:
        data = ast.literal_eval(found[-1])
    except (ValueError, SyntaxError):
        return None
    return engine_args_from_mapping(data) if isinstance(data, Mapping) else None


def engine_args_from_mapping(data: Mapping[str, Any]) -> EngineArgs:
    for key, (_, default, what) in UNMODELLED.items():  # as --engine-args refuses them
        if data.get(key) not in (None, default, float(default)):
            raise UsageError(f"the engine's logged {key} = {data[key]!r}: {what} is not modelled, so its figures "
                             "cannot be set beside a plan")  # fmt: skip
    known = {f.name for f in fields(EngineArgs)} - {"tokens", "flags_given"} - DERIVED
    values = {k: v for k, v in data.items() if k in known and v is not None}
    if "speculative_method" in values and not isinstance(values["speculative_method"], str):
        del values["speculative_method"]
    runtime = runtime_from_log(data)
    runtime.apply(values)
    if isinstance(values.get("hf_overrides"), Mapping):  # the log prints it as a dict
        values["hf_overrides"] = json.dumps(dict(values["hf_overrides"]), sort_keys=True)
    elif "hf_overrides" in values and not isinstance(values["hf_overrides"], str):
        del values["hf_overrides"]
    if "model" not in values and isinstance(data.get("model_tag"), str):
        values["model"] = data["model_tag"]
    for dest, value in values.items():
        if why := out_of_range(dest, value):
            raise UsageError(f"the engine's logged {dest}: {why}")
    args = EngineArgs(**values)
    tokens: list[str] = [args.model] if args.model else []
    for dest, value in args.given().items():
        flag = _DEST_FLAGS.get(dest) if dest != "model" else None  # the model leads, as a positional
        if dest == "speculative_method":
            if "speculative" in runtime.configs:
                tokens += ["--speculative-config", json.dumps(runtime.configs["speculative"])]
        elif flag:
            tokens += [flag, str(value)]
        elif isinstance(value, bool):
            switch = next((f for f, (d, on) in VLLM_SWITCHES.items() if d == dest and on == value), None)
            tokens += [switch] if switch else []
    tokens += log_runtime_tokens(data, runtime)
    given = tuple(f for f, (d, _) in VLLM_FLAGS.items() if d in values)
    given += tuple(f for f, (d, _) in VLLM_SWITCHES.items() if d in values)
    return replace(args, tokens=tuple(tokens), flags_given=given)
