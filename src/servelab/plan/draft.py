"""A speculative draft's memory beside its target, as vLLM 0.25.1 loads it from a local folder (its config.json).

- **EAGLE-3** (``model_executor/models/llama_eagle3.py``): per layer the Llama decoder's attention and gated MLP, the
  first layer's q/k/v reading the embedding and the hidden state side by side (2 x hidden in); a fusion ``fc`` from
  the target's three auxiliary hidden states (3 x target hidden) to the draft's hidden; norms; and a head of
  ``draft_vocab_size`` rows, its own where the checkpoint has one. The embedding is the target's.
- **EAGLE** (``llama_eagle.py``): the decoder layers and an ``fc`` from 2 x hidden; the target's embedding and head.
- **A draft model**: every parameter of its own config.
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

from servelab.core.errors import ServelabError
from servelab.plan.engine_args import EngineArgs
from servelab.plan.resolve import Resolved, resolve_model
from servelab.plan.spec import CacheLayer

READ_METHODS = ("eagle", "eagle3", "draft_model")


@dataclass(frozen=True, slots=True)
class Draft:
    method: str
    folder: str
    params: int  # loaded beside the target, in the model's dtype
    layers: tuple[CacheLayer, ...]  # what the draft adds to the KV cache a token
    head: str  # whose head the draft uses

    def note(self) -> str:
        return (f"speculative decoding ({self.method}, {self.folder}): the draft's {self.params / 1e6:,.0f}M "
                f"parameters counted beside the target's weights, its {len(self.layers)} attention layer(s) in the "
                f"KV cache; {self.head}")  # fmt: skip


def fold_draft(resolved: Resolved, engine: str, args: EngineArgs | None) -> tuple[Resolved, str | None]:
    """The target with the draft its vLLM flags name, and the plan's note on it (None: no draft). A target that
    holds its draft already is given back as it is (each path to a plan folds it, once)."""
    if "draft" in resolved.meta:
        return resolved, resolved.meta["draft"]
    if engine != "vllm" or args is None:
        return resolved, None
    found = read_draft(args.speculative_method, args.speculative_model, args.load_format == "dummy")
    if isinstance(found, Draft):
        return with_draft(resolved, found), found.note()
    return resolved, found


def read_draft(method: str | None, folder: str | None, dummy: bool) -> Draft | str | None:
    """The draft of ``--speculative-config`` (None: no draft to count; a string: why it is not counted)."""
    if method not in READ_METHODS:
        return None
    if not folder:
        return f"speculative decoding ({method}): no draft model given: its weights and KV are not counted"
    config_path = Path(folder).expanduser() / "config.json"
    try:
        if not config_path.is_file() or config_path.stat().st_size > 16 * 2**20:  # a FIFO would block the read
            raise OSError("not a regular file of at most 16 MiB")
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return (f"speculative decoding ({method}): no readable {config_path} here: the draft's weights and KV are "
                "not counted")  # fmt: skip
    try:
        if method == "draft_model":
            spec = resolve_model(folder).spec
            return Draft(method, folder, spec.total_params, spec.layers, "its own head and embedding")
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
        return _eagle(method, folder, config, dummy)
    except (ServelabError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        why = f"{type(exc).__name__}: {exc}" if isinstance(exc, KeyError) else str(exc)
        return (f"speculative decoding ({method}): the draft's {config_path} is not one servelab can read ({why}): "
                "its weights and KV are not counted")  # fmt: skip


def _positive(config: dict[str, Any], key: str, default: int | None = None) -> int:
    """A size the config states (or ``default`` where it states none): a whole number of at least 1."""
    value = config.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 24:
        raise ValueError(f"{key} = {value!r} is not a whole number from 1 to {1 << 24:,}")
    return value


def _eagle(method: str, folder: str, config: dict[str, Any], dummy: bool) -> Draft:
    hidden = _positive(config, "hidden_size")
    heads = _positive(config, "num_attention_heads")
    kv_heads = _positive(config, "num_key_value_heads", heads)
    head_dim = _positive(config, "head_dim", max(1, hidden // heads))
    inner = _positive(config, "intermediate_size", 4 * hidden)
    count = _positive(config, "num_hidden_layers", 1)
    if count > 1024:
        raise ValueError(f"num_hidden_layers = {count:,}: more layers than a draft has")
    target_hidden = _positive(config, "target_hidden_size", hidden)
    q, kv, o = heads * head_dim, 2 * kv_heads * head_dim, heads * head_dim * hidden
    layer_params = o + 3 * hidden * inner + 2 * hidden
    first_in = 2 * hidden if method == "eagle3" else hidden
    params = first_in * (q + kv) + (count - 1) * hidden * (q + kv) + count * layer_params + hidden
    if method == "eagle3":
        params += 3 * target_hidden * hidden + hidden  # fc from three auxiliary states, and the hidden norm
        vocab = _positive(config, "draft_vocab_size", _positive(config, "vocab_size", 1))
        own_head = not dummy and bool(vocab)
        params += vocab * hidden if own_head else 0
        head = (f"its own head of {vocab:,} rows" if own_head else
                "the target's head (dummy weights: vLLM shares it)")  # fmt: skip
    else:
        params += 2 * hidden * hidden
        head = "the target's head"
    layers = tuple(CacheLayer("full", kv_heads, head_dim, head_dim) for _ in range(count))
    return Draft(method, folder, params, layers, head)


def with_draft(resolved: Resolved, draft: Draft) -> Resolved:
    """The target as vLLM holds it with its draft: the draft's parameters among the weights (16-bit, like norms:
    a draft has no quantization of its own), its layers in the KV cache."""
    spec = resolved.spec
    params = replace(spec.params, other=spec.params.other + draft.params)
    weights = resolved.weights_bytes + 2 * draft.params if resolved.weights_bytes is not None else None
    source = resolved.weights_source
    if weights is not None:
        source += f" + the draft's {draft.params / 1e6:,.0f}M parameters at 16 bits"
    spec = replace(spec, layers=spec.layers + draft.layers, params=params)
    meta = {**resolved.meta, "draft": draft.note()}
    return replace(resolved, spec=spec, meta=meta, weights_bytes=weights, weights_source=source)
