"""Tiny evaluator-side models built offline from configs, for tests, the demo and the benchmarks.

Each builder writes an ordinary Hugging Face folder that loads through the same
``from_pretrained`` path a user takes with real weights; nothing reaches a hub. Evaluators
come in two Qwen-VL families: Qwen2.5-VL (:func:`build_tiny_qwen2_5_vl`) and Qwen3-VL
(:func:`build_tiny_qwen3_vl`); judges of other families are Gemma-3 (:func:`build_tiny_gemma3`)
and GLM-4V (:func:`build_tiny_glm4v`, scored by ``ProcessorBackend``).
Generator builders (tiny FLUX, FLUX-Kontext, Qwen-Image-Edit) live in
:mod:`paco_grpo.testing`.
"""

from paco_reward.testing.clip import build_tiny_clip
from paco_reward.testing.gemma3 import build_tiny_gemma3
from paco_reward.testing.glm4v import build_tiny_glm4v
from paco_reward.testing.pickscore import build_tiny_pickscore
from paco_reward.testing.qwen import build_tiny_qwen2_5_vl, build_tiny_tokenizer
from paco_reward.testing.qwen3_vl import build_tiny_qwen3_vl

__all__ = [
    "build_tiny_clip",
    "build_tiny_gemma3",
    "build_tiny_glm4v",
    "build_tiny_qwen2_5_vl",
    "build_tiny_pickscore",
    "build_tiny_qwen3_vl",
    "build_tiny_tokenizer",
]
