"""The user's real engine flags (``--engine-args "..."``, or a start-up log's "non-default args").

Every flag that changes memory is read; the rest are kept verbatim, so the command line a plan
prints is the user's own, completed with what the plan decided. vLLM, SGLang and llama.cpp each
have their own spellings of the same settings.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from servelab.core.errors import UsageError

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(value: str) -> int:
    """vLLM's human-readable integers: 32k = 32,000, 32K = 32,768, 20G = 20 GiB; plain digits as they are."""
    text = str(value).strip()
    match = _HUMAN.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise UsageError(f"{text!r}: decimals are not allowed with the binary suffix {suffix}")
        return int(number) * _BINARY[suffix]
    try:
        return int(float(text)) if "." in text or "e" in text.lower() else int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a number") from None


def _bool(value: str) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


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
    disable_hybrid_kv_cache_manager: bool | None = None
    hf_overrides: str | None = None  # vLLM's --hf-overrides, as canonical JSON (a JSON object)
    speculative_method: str | None = None  # vLLM's --speculative-config: its method
    num_speculative_tokens: int | None = None  # --speculative-config's num_speculative_tokens
    parallel_drafting: bool | None = None  # --speculative-config's parallel_drafting
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


def json_object(value: str) -> str:
    """A JSON object given on the command line, as canonical JSON; anything else is refused."""
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise UsageError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError("must be a JSON object, e.g. '{\"attention_chunk_size\": 0}'")
    return json.dumps(data, sort_keys=True)


MTP_METHODS = frozenset({
    "deepseek_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp",
    "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "gemma4_mtp",
})  # fmt: skip
SPECULATIVE_METHODS = MTP_METHODS | {"ngram", "[ngram]", "medusa", "mlp_speculator", "draft_model", "suffix",
                                     "custom_class", "eagle", "eagle3", "extract_hidden_states", "dflash",
                                     "ngram_gpu", "dspark"}  # fmt: skip


def speculative_method(value: str) -> str:
    """vLLM's --speculative-config (a JSON object): its method, named from the draft model where not given, by
    vLLM 0.25.1's own rule (config/speculative.py; a name it cannot place is a draft model)."""
    return _speculative_method(json.loads(json_object(value)))


def _speculative_method(data: Mapping[str, Any]) -> str:
    raw_model = str(data.get("model") or "")
    model = raw_model.lower()
    method = data.get("method")
    if method is not None and method not in SPECULATIVE_METHODS:
        raise UsageError(
            f"vLLM 0.25.1 has no speculative method {method!r}", hint=", ".join(sorted(SPECULATIVE_METHODS))
        )
    if "." in raw_model and "/" not in raw_model and not raw_model.startswith(("http://", "https://", "file://")):
        return "custom_class"  # a module path: vLLM takes it for a proposer class whatever the method says
    if method is None:
        if not model:
            raise UsageError('needs a "method" or a draft "model"')
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    method = "mtp" if method in MTP_METHODS else "ngram" if method == "[ngram]" else method
    if model and method in ("draft_model", "medusa", "mlp_speculator", "mtp"):
        # the draft's name, for any method but these four (its config's model_type is not read here)
        named = ("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")
        method = next((found for part, found in named if part in model), method)
    return str(method)


Setting = tuple[str, Callable[[str], Any]]
_SWITCH = "__switch__"

VLLM_FLAGS: dict[str, Setting] = {
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
    "--speculative-config": ("speculative_method", speculative_method),
    "-sc": ("speculative_method", speculative_method),
}
VLLM_SWITCHES: dict[str, tuple[str, bool]] = {
    "--enforce-eager": ("enforce_eager", True),
    "--no-enforce-eager": ("enforce_eager", False),
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
    "--disable-hybrid-kv-cache-manager": ("disable_hybrid_kv_cache_manager", True),
    "--no-disable-hybrid-kv-cache-manager": ("disable_hybrid_kv_cache_manager", False),
}
SGLANG_FLAGS: dict[str, Setting] = {
    "--mem-fraction-static": ("gpu_memory_utilization", float),
    "--context-length": ("max_model_len", int),
    "--max-running-requests": ("max_num_seqs", int),
    "--chunked-prefill-size": ("max_num_batched_tokens", int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--page-size": ("block_size", int),
    "--tp-size": ("tensor_parallel_size", int),
    "--tp": ("tensor_parallel_size", int),
    "--quantization": ("quantization", str),
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
}
LLAMACPP_SWITCHES: dict[str, tuple[str, bool]] = {}
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
    "kv_cache_memory_bytes": (0, 1 << 50),
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


_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_JSON_CONFIGS = {"--speculative-config": "speculative", "-sc": "speculative", "--compilation-config": "compilation",
                 "-cc": "compilation"}  # fmt: skip
_OPT_LEVELS = ("0", "1", "2", "3")
# vLLM flags that change the model runner or the CUDA graphs: (dest, kind) with kind "switch", "int", "str", "list"
VLLM_RUNTIME: dict[str, tuple[str, str]] = {
    "--enable-lora": ("enable_lora", "switch"),
    "--no-enable-lora": ("enable_lora", "off"),
    "--max-cudagraph-capture-size": ("max_cudagraph_capture_size", "int"),
    "--cudagraph-capture-sizes": ("cudagraph_capture_sizes", "list"),
    "--performance-mode": ("performance_mode", "str"),
    "--optimization-level": ("optimization_level", "str"),
    "--enable-prompt-embeds": ("prompt embeds", "switch"),
    "--logprobs-mode": ("logprobs_mode", "str"),
    "--logits-processors": ("custom logits processors", "list"),
    "--kv-sharing-fast-prefill": ("KV sharing fast prefill", "switch"),
    "--enable-return-routed-experts": ("routed experts capture", "switch"),
    "--ec-transfer-config": ("EC transfer", "str"),
}
V2_BLOCKING = ("prompt embeds", "custom logits processors", "KV sharing fast prefill", "routed experts capture",
               "EC transfer")  # fmt: skip
COMPILATION_MODES = {"none": 0, "stock_torch_compile": 1, "dynamo_trace_once": 2, "vllm_compile": 3}


def _vllm_flag(token: str) -> str:
    """The flag as vLLM's parser reads it: underscores of a --name are dashes (up to its first '.')."""
    if not token.startswith("--"):
        return token
    key, eq, value = token.partition("=")
    head, dot, rest = key.partition(".")
    return head.replace("_", "-") + dot + rest + eq + value


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _merge(into: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        into = into.setdefault(key, {})
    into[keys[-1]] = value


def _bool_env(value: str) -> bool | None:
    try:
        return bool(int(value))
    except ValueError:
        return _bool(value)


def _runtime(values: dict[str, Any], configs: dict[str, dict[str, Any]], extra: dict[str, Any],
             env: dict[str, str]) -> None:  # fmt: skip
    """What the speculative and compilation configs, the runner flags and the environment set."""
    spec = configs.get("speculative")
    if spec:
        try:
            values["speculative_method"] = _speculative_method(spec)
        except UsageError as exc:
            raise UsageError(f"--engine-args: --speculative-config: {exc}") from None
        if isinstance(spec.get("num_speculative_tokens"), int):
            values["num_speculative_tokens"] = spec["num_speculative_tokens"]
        if spec.get("parallel_drafting") is not None:
            values["parallel_drafting"] = bool(spec["parallel_drafting"])
    cc = configs.get("compilation") or {}
    if cc.get("cudagraph_mode") is not None:
        values["cudagraph_mode"] = str(cc["cudagraph_mode"]).upper()
    mode = cc.get("mode", cc.get("level"))
    if mode is not None:
        name = str(mode).lower()
        values["compilation_mode"] = int(name) if name.isdigit() else COMPILATION_MODES.get(name)
    if cc.get("max_cudagraph_capture_size") is not None:
        values["max_cudagraph_capture_size"] = int(cc["max_cudagraph_capture_size"])
    if cc.get("cudagraph_capture_sizes") is not None:
        values["cudagraph_capture_sizes"] = tuple(int(x) for x in cc["cudagraph_capture_sizes"])
    for dest in ("max_cudagraph_capture_size", "cudagraph_capture_sizes", "enable_lora", "performance_mode"):
        if dest in extra:
            values[dest] = extra[dest]
    if "optimization_level" in extra:
        level = str(extra["optimization_level"])
        if level not in _OPT_LEVELS:
            raise UsageError(f"--engine-args: -O {level!r}: vLLM 0.25.1's levels are 0 to 3")
        values["optimization_level"] = int(level)
    blockers = [name for name in V2_BLOCKING if extra.get(name)]
    if str(extra.get("logprobs_mode", "")) in ("raw_logits", "processed_logits"):
        blockers.append(f"logprobs mode '{extra['logprobs_mode']}'")
    if blockers:
        values["v2_blockers"] = tuple(blockers)
    if "VLLM_USE_V2_MODEL_RUNNER" in env:
        values["use_v2_model_runner"] = _bool_env(env["VLLM_USE_V2_MODEL_RUNNER"])
    if "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in env:
        values["estimate_cudagraphs"] = _bool_env(env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"])
    if env.get("TORCH_COMPILE_DISABLE") == "1":
        values["torch_compile_disable"] = True


def parse_engine_args(text: str, engine: str = "vllm") -> EngineArgs:
    """Read a quoted flag string (``"vllm serve M --max-model-len 32k -tp 2 ..."`` or just the flags; environment
    assignments before ``vllm serve`` are read too)."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--engine-args cannot be split into flags: {exc}") from None
    flags, switches = ENGINES.get(engine, ENGINES["vllm"])
    is_vllm = flags is VLLM_FLAGS
    env: dict[str, str] = {}
    while tokens and _ENV.fullmatch(tokens[0]) and not tokens[0].startswith("-"):
        name, _, value = tokens.pop(0).partition("=")
        env[name] = value
    if tokens[:2] == ["vllm", "serve"]:
        tokens = tokens[2:]
    values: dict[str, Any] = {}
    configs: dict[str, dict[str, Any]] = {}
    extra: dict[str, Any] = {}
    given: list[str] = []
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if is_vllm and token.startswith("-"):
            token = _vllm_flag(token)
        flag, eq, inline = token.partition("=") if token.startswith("-") else (token, "", "")
        if not token.startswith("-"):
            if not kept:  # the first positional is the model
                values["model"] = token
            kept.append(token)
            i += 1
            continue
        if is_vllm and (token.startswith("-O") and token != "-O" and not token.startswith("--")):
            extra["optimization_level"] = token[3:] if token[2:3] == "=" else token[2:]
            kept.append(tokens[i])
            i += 1
            continue
        if is_vllm and token == "-O" and i + 1 < len(tokens) and tokens[i + 1] in _OPT_LEVELS:
            extra["optimization_level"] = tokens[i + 1]
            kept += tokens[i : i + 2]
            i += 2
            continue
        if is_vllm and "." in flag and flag.split(".")[0] in _JSON_CONFIGS:  # -cc.cudagraph_mode=NONE
            head, *keys = flag.split(".")
            raw = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            _merge(configs.setdefault(_JSON_CONFIGS[head], {}), keys, _json_or_text(raw))
            kept += [tokens[i]] if eq else tokens[i : i + 2]
            i += 1 if eq else 2
            continue
        if is_vllm and flag in _JSON_CONFIGS:
            raw = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if not raw:
                raise UsageError(f"--engine-args: {flag} needs a value")
            try:
                data = json.loads(json_object(raw))
            except UsageError as exc:
                raise UsageError(f"--engine-args: {flag} {raw!r}: {exc}") from None
            configs.setdefault(_JSON_CONFIGS[flag], {}).update(data)
            if _JSON_CONFIGS[flag] == "speculative":
                given += [f for f, (d, _) in flags.items() if d == "speculative_method"]
            kept += [tokens[i]] if eq else tokens[i : i + 2]
            i += 1 if eq else 2
            continue
        if is_vllm and flag in VLLM_RUNTIME:
            dest, kind = VLLM_RUNTIME[flag]
            if kind in ("switch", "off"):
                extra[dest] = kind == "switch"
                kept.append(tokens[i])
                i += 1
                continue
            if kind == "list":
                taken = [inline] if eq else []
                j = i + 1
                while not eq and j < len(tokens) and not tokens[j].startswith("-"):
                    taken.append(tokens[j])
                    j += 1
                if dest == "cudagraph_capture_sizes":
                    try:
                        extra[dest] = tuple(int(x) for part in taken for x in part.split(",") if x)
                    except ValueError:
                        raise UsageError(f"--engine-args: {flag}: {taken!r} are not whole numbers") from None
                else:
                    extra[dest] = bool(taken)
                kept += tokens[i:j] if not eq else [tokens[i]]
                i = j if not eq else i + 1
                continue
            raw = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if not raw:
                raise UsageError(f"--engine-args: {flag} needs a value")
            extra[dest] = human_int(raw) if kind == "int" else raw
            kept += [tokens[i]] if eq else tokens[i : i + 2]
            i += 1 if eq else 2
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
            _take(values, dest, cast, raw, flag)
            given += [f for f, (d, _) in flags.items() if d == dest]
            kept += [tokens[i]] if eq else [tokens[i], raw]
            i += 1 if eq else 2
            continue
        kept.append(tokens[i])  # a flag servelab does not read: kept for the command line
        i += 1
    if is_vllm:
        _runtime(values, configs, extra, env)
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


# argparse names in a log's non-default args that change the runner or the graphs -> VLLM_RUNTIME's dest
_LOG_RUNTIME = {"enable_lora": "enable_lora", "max_cudagraph_capture_size": "max_cudagraph_capture_size",
                "cudagraph_capture_sizes": "cudagraph_capture_sizes", "performance_mode": "performance_mode",
                "optimization_level": "optimization_level", "enable_prompt_embeds": "prompt embeds",
                "logprobs_mode": "logprobs_mode", "logits_processors": "custom logits processors",
                "kv_sharing_fast_prefill": "KV sharing fast prefill",
                "enable_return_routed_experts": "routed experts capture",
                "ec_transfer_config": "EC transfer"}  # fmt: skip
_DERIVED = {"num_speculative_tokens", "parallel_drafting", "optimization_level", "cudagraph_mode", "compilation_mode",
            "max_cudagraph_capture_size", "cudagraph_capture_sizes", "enable_lora", "performance_mode", "v2_blockers",
            "use_v2_model_runner", "estimate_cudagraphs", "torch_compile_disable"}  # fmt: skip


def engine_args_from_mapping(data: Mapping[str, Any]) -> EngineArgs:
    known = {f.name for f in fields(EngineArgs)} - {"tokens", "flags_given"} - _DERIVED
    values = {k: v for k, v in data.items() if k in known and v is not None}
    if "speculative_method" in values and not isinstance(values["speculative_method"], str):
        del values["speculative_method"]
    configs = {name: dict(data[key]) for key, name in (("speculative_config", "speculative"),
               ("compilation_config", "compilation")) if isinstance(data.get(key), Mapping)}  # fmt: skip
    extra: dict[str, Any] = {}
    for key, dest in _LOG_RUNTIME.items():
        value = data.get(key)
        if value is None or value is False:
            continue
        if key == "cudagraph_capture_sizes" and isinstance(value, list | tuple):
            value = tuple(int(x) for x in value)
        elif key == "optimization_level":
            value = str(getattr(value, "value", value))
        extra[dest] = value
    _runtime(values, configs, extra, {})
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
        flag = _DEST_FLAGS.get(dest)
        if dest == "speculative_method":
            if "speculative" in configs:
                tokens += ["--speculative-config", json.dumps(configs["speculative"])]
        elif flag:
            tokens += [flag, str(value)]
        elif isinstance(value, bool):
            switch = next((f for f, (d, on) in VLLM_SWITCHES.items() if d == dest and on == value), None)
            tokens += [switch] if switch else []
    if "compilation" in configs:
        tokens += ["--compilation-config", json.dumps(configs["compilation"])]
    for key in ("enable_lora", "enable_prompt_embeds", "kv_sharing_fast_prefill", "enable_return_routed_experts"):
        if data.get(key) is True:
            tokens.append("--" + key.replace("_", "-"))
    for key in ("max_cudagraph_capture_size", "performance_mode", "logprobs_mode"):
        if data.get(key) is not None:
            tokens += ["--" + key.replace("_", "-"), str(data[key])]
    given = tuple(f for f, (d, _) in VLLM_FLAGS.items() if d in values)
    given += tuple(f for f, (d, _) in VLLM_SWITCHES.items() if d in values)
    return replace(args, tokens=tuple(tokens), flags_given=given)
