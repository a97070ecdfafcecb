"""vLLM's flags and environment that change its model runner or its CUDA graphs (plan/cudagraphs.py reads what
they set): the speculative and compilation configs (whole, or ``-cc.key=value``), ``-O`` levels, capture sizes,
LoRA, the features vLLM's V2 runner lacks, and ``VLLM_USE_V2_MODEL_RUNNER`` and the estimate's switch set before
``vllm serve``; and the speculative method named as vLLM 0.25.1 names it (config/speculative.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servelab.core.errors import UsageError
from servelab.plan.flag_text import human_int, json_object, truthy

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
    return speculative_method_of(json.loads(json_object(value)))


def speculative_method_of(data: Mapping[str, Any]) -> str:
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


_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_JSON_CONFIGS = {"--speculative-config": "speculative", "-sc": "speculative", "--compilation-config": "compilation",
                 "-cc": "compilation"}  # fmt: skip
_OPT_LEVELS = ("0", "1", "2", "3")
# the features vLLM's V2 runner lacks, as flags: (what the feature is called, kind)
V2_BLOCKING_FLAGS: dict[str, tuple[str, str]] = {
    "--enable-prompt-embeds": ("prompt embeds", "switch"),
    "--logits-processors": ("custom logits processors", "list"),
    "--kv-sharing-fast-prefill": ("KV sharing fast prefill", "switch"),
    "--enable-return-routed-experts": ("routed experts capture", "switch"),
    "--ec-transfer-config": ("EC transfer", "str"),
}
V2_BLOCKING = tuple(name for name, _ in V2_BLOCKING_FLAGS.values())
# vLLM flags that change the model runner or the CUDA graphs: (dest, kind) with kind "switch", "int", "str", "list"
VLLM_RUNTIME: dict[str, tuple[str, str]] = {
    "--enable-lora": ("enable_lora", "switch"),
    "--no-enable-lora": ("enable_lora", "off"),
    "--max-cudagraph-capture-size": ("max_cudagraph_capture_size", "int"),
    "--cudagraph-capture-sizes": ("cudagraph_capture_sizes", "list"),
    "--performance-mode": ("performance_mode", "str"),
    "--optimization-level": ("optimization_level", "str"),
    "--logprobs-mode": ("logprobs_mode", "str"),
    **V2_BLOCKING_FLAGS,
}
COMPILATION_MODES = {"none": 0, "stock_torch_compile": 1, "dynamo_trace_once": 2, "vllm_compile": 3}
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")  # config/vllm.py
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")  # config/compilation.py


def vllm_flag(token: str) -> str:
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
        return truthy(value)


def _runtime(values: dict[str, Any], configs: dict[str, dict[str, Any]], extra: dict[str, Any],
             env: dict[str, str]) -> None:  # fmt: skip
    """What the speculative and compilation configs, the runner flags and the environment set."""
    spec = configs.get("speculative")
    if spec:
        try:
            values["speculative_method"] = speculative_method_of(spec)
        except UsageError as exc:
            raise UsageError(f"--engine-args: --speculative-config: {exc}") from None
        if spec.get("num_speculative_tokens") is not None:
            values["num_speculative_tokens"] = _whole(spec["num_speculative_tokens"], "num_speculative_tokens", 1)
        if isinstance(spec.get("model"), str) and spec["model"]:
            values["speculative_model"] = spec["model"]
        if spec.get("parallel_drafting") is not None:
            values["parallel_drafting"] = bool(spec["parallel_drafting"])
        if spec.get("draft_sample_method") is not None:  # the drafts' probabilities reach the rejection sampler
            standard = spec.get("rejection_sample_method", "standard") == "standard"
            values["draft_probabilistic"] = standard and spec["draft_sample_method"] == "probabilistic"
    _compilation(values, configs.get("compilation") or {})
    for dest in ("max_cudagraph_capture_size", "cudagraph_capture_sizes", "enable_lora", "performance_mode"):
        if dest in extra:
            values[dest] = extra[dest]
    if values.get("performance_mode") not in (None, *PERFORMANCE_MODES):
        raise UsageError(f"--performance-mode {values['performance_mode']!r} is not one of vLLM's",
                         hint=", ".join(PERFORMANCE_MODES))  # fmt: skip
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


def _compilation(values: dict[str, Any], cc: Mapping[str, Any]) -> None:
    """What --compilation-config sets, each value checked as vLLM's own config would (a value it would refuse is
    refused here, never planned as something else)."""
    if cc.get("cudagraph_mode") is not None:
        mode_name = str(cc["cudagraph_mode"]).upper()
        if mode_name not in CUDAGRAPH_MODES:
            raise UsageError(f"--compilation-config: cudagraph_mode {cc['cudagraph_mode']!r} is not one of vLLM's",
                             hint=", ".join(CUDAGRAPH_MODES))  # fmt: skip
        values["cudagraph_mode"] = mode_name
    mode = cc.get("mode", cc.get("level"))
    if mode is not None:
        name = str(mode).lower()
        level = int(name) if name.isdigit() else COMPILATION_MODES.get(name)
        if level not in COMPILATION_MODES.values():
            raise UsageError(f"--compilation-config: mode {mode!r} is not one of vLLM's",
                             hint=", ".join(f"{k} ({v})" for k, v in COMPILATION_MODES.items()))  # fmt: skip
        values["compilation_mode"] = level
    if cc.get("max_cudagraph_capture_size") is not None:
        values["max_cudagraph_capture_size"] = _whole(cc["max_cudagraph_capture_size"], "max_cudagraph_capture_size")
    sizes = cc.get("cudagraph_capture_sizes")
    if sizes is not None:
        if not isinstance(sizes, list | tuple):
            raise UsageError(f"--compilation-config: cudagraph_capture_sizes {sizes!r} is not a list of sizes")
        values["cudagraph_capture_sizes"] = tuple(_whole(x, "cudagraph_capture_sizes", 1) for x in sizes)


def _whole(value: Any, what: str, least: int = 0) -> int:
    """A config's whole number (an int, or a string of digits as the log may print it), else a clear refusal."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 1 << 24:
        raise UsageError(f"{what} = {value!r}: vLLM wants a whole number from {least} to {1 << 24:,}")
    return value


@dataclass
class RuntimeReader:
    """Reads, from a vLLM command line, the flags and environment that change its runner or its CUDA graphs."""

    configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # speculative / compilation JSON, merged
    extra: dict[str, Any] = field(default_factory=dict)  # VLLM_RUNTIME's settings, by dest
    env: dict[str, str] = field(default_factory=dict)  # assignments before `vllm serve`
    speculative_given: bool = False

    def read_env(self, tokens: list[str]) -> list[str]:
        """The tokens past the leading ``NAME=value`` assignments, which are kept as the environment."""
        while tokens and _ENV.fullmatch(tokens[0]) and not tokens[0].startswith("-"):
            name, _, value = tokens.pop(0).partition("=")
            self.env[name] = value
        return tokens

    def take(self, tokens: list[str], i: int, kept: list[str]) -> int | None:
        """Read the flag at ``tokens[i]`` if it is one of these (what it consumed goes to ``kept``): the next
        index, else None."""
        token = vllm_flag(tokens[i])
        flag, eq, inline = token.partition("=")
        if token.startswith("-O") and not token.startswith("--"):
            return self._level(tokens, i, token, kept)
        if flag in _JSON_CONFIGS or ("." in flag and flag.split(".")[0] in _JSON_CONFIGS):
            raw = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            self._config(flag, raw)
            kept += [tokens[i]] if eq else tokens[i : i + 2]
            return i + (1 if eq else 2)
        if flag in VLLM_RUNTIME:
            return self._runtime_flag(tokens, i, flag, inline if eq else None, kept)
        return None

    def _level(self, tokens: list[str], i: int, token: str, kept: list[str]) -> int | None:
        if token != "-O":
            self.extra["optimization_level"] = token[3:] if token[2:3] == "=" else token[2:]
            kept.append(tokens[i])
            return i + 1
        if i + 1 >= len(tokens) or tokens[i + 1].startswith("-"):
            raise UsageError("--engine-args: -O needs a level (vLLM 0.25.1's are 0 to 3)")
        self.extra["optimization_level"] = tokens[i + 1]  # checked with the rest (a level past 3 is refused)
        kept += tokens[i : i + 2]
        return i + 2

    def _config(self, flag: str, raw: str) -> None:
        head, *keys = flag.split(".")
        name = _JSON_CONFIGS[head]
        if keys:  # -cc.cudagraph_mode=NONE
            _merge(self.configs.setdefault(name, {}), keys, _json_or_text(raw))
        else:
            if not raw:
                raise UsageError(f"--engine-args: {flag} needs a value")
            try:
                self.configs.setdefault(name, {}).update(json.loads(json_object(raw)))
            except UsageError as exc:
                raise UsageError(f"--engine-args: {flag} {raw!r}: {exc}") from None
        self.speculative_given |= name == "speculative"

    def _runtime_flag(self, tokens: list[str], i: int, flag: str, inline: str | None, kept: list[str]) -> int:
        dest, kind = VLLM_RUNTIME[flag]
        if kind in ("switch", "off"):
            self.extra[dest] = kind == "switch"
            kept.append(tokens[i])
            return i + 1
        if kind == "list":
            j = i + 1
            taken = [inline] if inline is not None else []
            while inline is None and j < len(tokens) and not tokens[j].startswith("-"):
                taken.append(tokens[j])
                j += 1
            self.extra[dest] = _sizes(flag, taken) if dest == "cudagraph_capture_sizes" else bool(taken)
            kept += tokens[i:j]
            return j
        raw = inline if inline is not None else (tokens[i + 1] if i + 1 < len(tokens) else "")
        if not raw:
            raise UsageError(f"--engine-args: {flag} needs a value")
        self.extra[dest] = human_int(raw) if kind == "int" else raw
        kept += [tokens[i]] if inline is not None else tokens[i : i + 2]
        return i + (1 if inline is not None else 2)

    def apply(self, values: dict[str, Any]) -> None:
        """Put what was read into ``values`` (EngineArgs' fields)."""
        _runtime(values, self.configs, self.extra, self.env)


def _sizes(flag: str, taken: list[str]) -> tuple[int, ...]:
    try:
        return tuple(int(x) for part in taken for x in part.split(",") if x)
    except ValueError:
        raise UsageError(f"--engine-args: {flag}: {taken!r} are not whole numbers") from None


# argparse names in a log's non-default args that change the runner or the graphs -> VLLM_RUNTIME's dest
LOG_RUNTIME = {"enable_lora": "enable_lora", "max_cudagraph_capture_size": "max_cudagraph_capture_size",
                "cudagraph_capture_sizes": "cudagraph_capture_sizes", "performance_mode": "performance_mode",
                "optimization_level": "optimization_level", "enable_prompt_embeds": "prompt embeds",
                "logprobs_mode": "logprobs_mode", "logits_processors": "custom logits processors",
                "kv_sharing_fast_prefill": "KV sharing fast prefill",
                "enable_return_routed_experts": "routed experts capture",
                "ec_transfer_config": "EC transfer"}  # fmt: skip
DERIVED = {"num_speculative_tokens", "speculative_model", "parallel_drafting", "draft_probabilistic",
           "optimization_level", "cudagraph_mode", "compilation_mode", "max_cudagraph_capture_size",
           "cudagraph_capture_sizes", "enable_lora", "performance_mode", "v2_blockers", "use_v2_model_runner",
           "estimate_cudagraphs", "torch_compile_disable"}  # fmt: skip


def runtime_from_log(data: Mapping[str, Any]) -> RuntimeReader:
    """What a log's non-default args (argparse names) say about the runner and the graphs."""
    reader = RuntimeReader()
    for key, name in (("speculative_config", "speculative"), ("compilation_config", "compilation")):
        if isinstance(data.get(key), Mapping):
            reader.configs[name] = dict(data[key])
    for key, dest in LOG_RUNTIME.items():
        value = data.get(key)
        if value is None or value is False:
            continue
        if key == "cudagraph_capture_sizes" and isinstance(value, list | tuple):
            value = tuple(int(x) for x in value)
        elif key == "optimization_level":
            value = str(getattr(value, "value", value))
        reader.extra[dest] = value
    return reader


def log_runtime_tokens(data: Mapping[str, Any], reader: RuntimeReader) -> list[str]:
    """The command-line flags for what a log's non-default args set (the compilation config and the switches)."""
    tokens = (
        ["--compilation-config", json.dumps(reader.configs["compilation"])] if "compilation" in reader.configs else []
    )
    for key in ("enable_lora", "enable_prompt_embeds", "kv_sharing_fast_prefill", "enable_return_routed_experts"):
        if data.get(key) is True:
            tokens.append("--" + key.replace("_", "-"))
    for key in ("max_cudagraph_capture_size", "performance_mode", "logprobs_mode"):
        if data.get(key) is not None:
            tokens += ["--" + key.replace("_", "-"), str(data[key])]
    return tokens
