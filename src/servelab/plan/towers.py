"""The parts of a checkpoint besides its language model (a vision or audio tower, its processor, projector or
adapters), which the plan does not model: a config holding one is refused, never planned without it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the words of a key naming a part besides the language model (its words split at "_"): a tower, its processor or
# projector, its adapters, its tokens (vision_config, mm_vision_tower, img_processor, audio_processor, speech_lora,
# image_token_id, ...); whole words, so OLMo's clip_qkv or a "summ_*" key is no tower
TOWER_WORDS = frozenset({"vision", "visual", "image", "images", "img", "video", "audio", "speech", "mm", "vit",
                         "siglip", "whisper", "perceiver", "resampler", "mmproj"})  # fmt: skip
TOWER_KEYS = frozenset({"embd_layer"})  # Phi-3-vision's image embedding
# architectures that carry such a part whatever their keys say
TOWER_ARCHITECTURES = ("Llava", "VL", "Vision", "Phi3V", "Phi4MM", "Omni", "Audio", "Speech", "Whisper", "Blip")


def unmodelled_parts(config: Mapping[str, Any]) -> list[str]:
    """The keys of ``config`` that name a part besides the language model (a vision or audio tower, its processor,
    projector or adapters), and an architecture that is multimodal by name: matched by the words such parts are
    named with, so a family servelab has not met is refused too, not planned without its tower."""
    keys = [key for key in config if config[key] and (key in TOWER_KEYS or TOWER_WORDS & set(key.lower().split("_")))]
    architectures = config.get("architectures")
    named = [str(a) for a in architectures if any(w in str(a) for w in TOWER_ARCHITECTURES)] if isinstance(
        architectures, list) else []  # fmt: skip
    return keys + [f"architecture {a}" for a in named]
