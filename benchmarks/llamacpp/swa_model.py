"""A tiny Gemma-3 (5 sliding-window layers to 1 global, window 512) as a GGUF with random f16 weights, plus the
same model's config.json, so llama-server's SWA cache can be set beside servelab's llama.cpp rules. SmolLM2's
tokenizer is reused from its GGUF. Nothing is downloaded.

usage: python benchmarks/llamacpp/swa_model.py OUT_DIR   (writes OUT_DIR/tiny-gemma3.gguf and OUT_DIR/config.json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter

from servelab.engines.convert_gguf import find_gguf

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, WINDOW = 256, 12, 4, 1, 64, 512, 512


def _tokenizer(writer: GGUFWriter) -> int:
    reader = GGUFReader(find_gguf())
    fields = reader.fields
    writer.add_tokenizer_model(str(fields["tokenizer.ggml.model"].contents()))
    writer.add_tokenizer_pre(str(fields["tokenizer.ggml.pre"].contents()))
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    writer.add_token_list(tokens)
    writer.add_token_types(list(fields["tokenizer.ggml.token_type"].contents()))
    writer.add_token_merges(list(fields["tokenizer.ggml.merges"].contents()))
    writer.add_bos_token_id(int(fields["tokenizer.ggml.bos_token_id"].contents()))
    writer.add_eos_token_id(int(fields["tokenizer.ggml.eos_token_id"].contents()))
    return len(tokens)


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(out / "tiny-gemma3.gguf", "gemma3")
    vocab = _tokenizer(writer)
    writer.add_context_length(32768)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(WINDOW)
    writer.add_rope_freq_base(1e6)
    rng = np.random.default_rng(0)

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float16))

    tensor("token_embd.weight", vocab, HIDDEN)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    for i in range(LAYERS):
        for norm in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            writer.add_tensor(f"blk.{i}.{norm}.weight", np.ones(HIDDEN, dtype=np.float32))
        for norm in ("attn_q_norm", "attn_k_norm"):
            writer.add_tensor(f"blk.{i}.{norm}.weight", np.ones(HEAD_DIM, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", HEADS * HEAD_DIM, HIDDEN)
        tensor(f"blk.{i}.attn_k.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        tensor(f"blk.{i}.attn_v.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        tensor(f"blk.{i}.attn_output.weight", HIDDEN, HEADS * HEAD_DIM)
        tensor(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    config = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM, "intermediate_size": FFN, "sliding_window": WINDOW, "sliding_window_pattern": 6,
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(LAYERS)],
        "vocab_size": vocab, "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": True,
    }  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
