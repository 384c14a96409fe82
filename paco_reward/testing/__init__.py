"""Tiny models built offline from configs, for tests, the demo and the benchmarks.

Each builder writes an ordinary Hugging Face folder that loads through the same
``from_pretrained`` path a user takes with real weights; nothing reaches a hub.
"""

from paco_reward.testing.clip import build_tiny_clip
from paco_reward.testing.flux import build_tiny_flux
from paco_reward.testing.flux_kontext import build_tiny_flux_kontext
from paco_reward.testing.pickscore import build_tiny_pickscore
from paco_reward.testing.qwen import build_tiny_model, build_tiny_tokenizer
from paco_reward.testing.qwen_image_edit import build_tiny_qwen_image_edit

__all__ = [
    "build_tiny_clip",
    "build_tiny_flux",
    "build_tiny_flux_kontext",
    "build_tiny_model",
    "build_tiny_pickscore",
    "build_tiny_qwen_image_edit",
    "build_tiny_tokenizer",
]
