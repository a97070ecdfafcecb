"""A speculative draft's memory beside its target, as vLLM 0.25.1 loads it from a local folder (its config.json), or
from the local Hugging Face cache for a hub id (never downloaded).

- **EAGLE-3** (``model_executor/models/llama_eagle3.py``): per layer the Llama decoder's attention and gated MLP, the
  first layer's q/k/v reading the embedding and the hidden state side by side (2 x hidden in); a fusion ``fc`` from
  the target's three auxiliary hidden states (3 x target hidden) to the draft's hidden; norms; and a head of
  ``draft_vocab_size`` rows, its own where the checkpoint has one. The embedding is the target's.
- **EAGLE** (``llama_eagle.py``): the decoder layers and an ``fc`` from 2 x hidden; the target's embedding and head.
- An EAGLE-3 draft narrower than its target (``target_hidden_size`` not its ``hidden_size``) keeps an embedding of
  its own (vLLM shares only one of the target's width).
- **A draft model**: every parameter of its own config, in its own quantization (``get_draft_quant_config``: a
  draft is quantized by its own checkpoint, not the target's).
- **Per GPU**: the decoder layers are split over tensor-parallel ranks like the target's; EAGLE's ``fc`` is held
  whole on each.
- **With ``--load-format dummy``** nothing is loaded, so vLLM never learns that the draft has a head of its own: the
  draft takes the target's (``spec_decode/eagle/utils.py``) and no head is counted.

Each draft attention layer joins the target's KV cache: a token keeps one more layer's K and V per draft layer (vLLM
groups it with the target's layers of its shape). A draft the plan cannot read is said, never guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servelab.plan.config import spec_from_config
from servelab.plan.engine_args import EngineArgs
from servelab.plan.quant import estimate_weights, scheme_for
from servelab.plan.resolve import Resolved, hf_cache_config
from servelab.plan.spec import CacheLayer

READ_METHODS = ("eagle", "eagle3", "draft_model")


@dataclass(frozen=True, slots=True)
class Draft:
    method: str
    folder: str
    params: int  # loaded beside the target
    bytes_per_gpu: int  # on one of the tensor-parallel GPUs, in the draft's own format
    layers: tuple[CacheLayer, ...]  # what the draft adds to the KV cache a token
    head: str  # whose head the draft uses

    def note(self) -> str:
        return (f"speculative decoding ({self.method}, {self.folder}): the draft's {self.params / 1e6:,.0f}M "
                f"parameters ({self.bytes_per_gpu / 2**30:.2f} GiB a GPU) counted beside the target's weights, its "
                f"{len(self.layers)} attention layer(s) in the KV cache; {self.head}; the drafter's own forward in "
                "the profile run is not modelled")  # fmt: skip


def fold_draft(resolved: Resolved, engine: str, args: EngineArgs | None) -> tuple[Resolved, str | None]:
    """The target with the draft its vLLM flags name, and the plan's note on it (None: no draft). A target that
    holds its draft already is given back as it is (each path to a plan folds it, once)."""
    if "draft" in resolved.meta:
        return resolved, resolved.meta["draft"]
    if engine != "vllm" or args is None:
        return resolved, None
    tp = args.tensor_parallel_size or 1
    found = read_draft(args.speculative_method, args.speculative_model, args.load_format == "dummy", tp)
    if isinstance(found, Draft):
        return with_draft(resolved, found), found.note()
    return resolved, found


def read_draft(method: str | None, folder: str | None, dummy: bool, tp: int = 1) -> Draft | str | None:
    """The draft of ``--speculative-config`` (None: no draft to count; a string: why it is not counted). Whatever
    the folder holds, this says why rather than raise; it reads the draft's config.json alone, never its weights."""
    if method not in READ_METHODS:
        return None
    if not folder:
        return f"speculative decoding ({method}): no draft model given: its weights and KV are not counted"
    try:
        config_path = _config_path(folder)
        if not config_path.is_file() or config_path.stat().st_size > 16 * 2**20:  # a FIFO would block the read
            raise OSError(f"no readable {config_path}: a regular file of at most 16 MiB")
        config = json.loads(config_path.read_text())
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
        if method == "draft_model":
            spec = spec_from_config(config, name=Path(folder).name, source=folder)
            weights = estimate_weights(spec, spec.quantization or scheme_for("bf16"), tp=tp).bytes
            return Draft(method, folder, spec.total_params, weights, spec.layers, "its own head and embedding")
        return _eagle(method, folder, config, dummy, tp)
    except Exception as exc:  # a draft folder is the user's: any failure to read it is said, never raised
        return (f"speculative decoding ({method}): the draft at {folder!r} is not one servelab can read "
                f"({type(exc).__name__}: {str(exc)[:200]}): its weights and KV are not counted")  # fmt: skip


def _config_path(folder: str) -> Path:
    """The draft's config.json: in the folder named, else, for a hub id (``org/name``) that is no local folder, in
    the local Hugging Face cache, as vLLM would find it offline. Nothing is downloaded."""
    local = Path(folder).expanduser()
    if local.is_dir() or folder.count("/") != 1 or folder.startswith((".", "/", "~")):
        return local / "config.json"
    cached = hf_cache_config(folder)
    if cached is None:
        raise OSError(f"no folder {folder!r} here and no copy of it in the local Hugging Face cache (nothing is "
                      "downloaded)")  # fmt: skip
    return cached


def _positive(config: dict[str, Any], key: str, default: int | None = None) -> int:
    """A size the config states (or ``default`` where it states none): a whole number of at least 1."""
    value = config.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 24:
        raise ValueError(f"{key} = {value!r} is not a whole number from 1 to {1 << 24:,}")
    return value


def _eagle(method: str, folder: str, config: dict[str, Any], dummy: bool, tp: int) -> Draft:
    hidden = _positive(config, "hidden_size")
    heads = _positive(config, "num_attention_heads")
    kv_heads = _positive(config, "num_key_value_heads", heads)
    head_dim = _positive(config, "head_dim", max(1, hidden // heads))
    inner = _positive(config, "intermediate_size", 4 * hidden)
    count = _positive(config, "num_hidden_layers", 1)
    if count > 1024:
        raise ValueError(f"num_hidden_layers = {count:,}: more layers than a draft has")
    target_hidden = _positive(config, "target_hidden_size", hidden)
    vocab = _positive(config, "vocab_size", 1)
    q, kv, o = heads * head_dim, 2 * kv_heads * head_dim, heads * head_dim * hidden
    first_in = 2 * hidden if method == "eagle3" else hidden
    split = first_in * (q + kv) + (count - 1) * hidden * (q + kv) + count * (o + 3 * hidden * inner + 2 * hidden)
    split += hidden  # the final norm
    if method == "eagle3":
        fc = 3 * target_hidden * hidden
        split += hidden  # the hidden-state norm
        head_rows = _positive(config, "draft_vocab_size", vocab)
        own_head = not dummy
        split += head_rows * hidden if own_head else 0
        own_embed = target_hidden != hidden
        split += vocab * hidden if own_embed else 0
        head = (
            f"its own head of {head_rows:,} rows" if own_head else "the target's head (dummy weights: vLLM shares it)"
        )
        head += ", its own embedding" if own_embed else ""
    else:
        fc, head = 2 * hidden * hidden, "the target's head"
    layers = tuple(CacheLayer("full", kv_heads, head_dim, head_dim) for _ in range(count))
    per_gpu = 2 * (-(-split // tp) + fc)  # 16-bit: the layers split over the ranks, the fc held whole on each
    return Draft(method, folder, split + fc, per_gpu, layers, head)


def with_draft(resolved: Resolved, draft: Draft) -> Resolved:
    """The target as vLLM holds it with its draft: its layers in the KV cache, and its bytes a GPU kept in
    ``meta["draft_bytes"]`` for the weights to add whatever their source (an estimate, a checkpoint's size, the
    safetensors headers or ``--weights``)."""
    spec = replace(resolved.spec, layers=resolved.spec.layers + draft.layers)
    meta = {**resolved.meta, "draft": draft.note(), "draft_bytes": draft.bytes_per_gpu}
    return replace(resolved, spec=spec, meta=meta)
