"""Tiny generators built offline from configs, for tests, the demo and the benchmarks.

Each builder writes an ordinary diffusers folder that loads through the same
``from_pretrained`` path a user takes with real weights; nothing reaches a hub.
"""

from paco_grpo.testing.flux import build_tiny_flux
from paco_grpo.testing.flux2 import build_tiny_flux2, build_tiny_flux2_klein
from paco_grpo.testing.flux_kontext import build_tiny_flux_kontext
from paco_grpo.testing.qwen_image import build_tiny_qwen_image
from paco_grpo.testing.qwen_image_edit import build_tiny_qwen_image_edit
from paco_grpo.testing.sd3 import build_tiny_sd3

__all__ = [
    "build_tiny_flux",
    "build_tiny_flux2",
    "build_tiny_flux2_klein",
    "build_tiny_flux_kontext",
    "build_tiny_qwen_image",
    "build_tiny_qwen_image_edit",
    "build_tiny_sd3",
]
