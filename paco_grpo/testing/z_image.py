"""Tiny, randomly initialised Z-Image pipelines built offline.

:func:`build_tiny_z_image` writes an ordinary diffusers folder with the four parts of
``Tongyi-MAI/Z-Image-Turbo``: a ``ZImageTransformer2DModel``, FLUX.1's kind of
``AutoencoderKL``, a Qwen3 text encoder with its tokenizer (a byte-level BPE trained on the
fly, :func:`paco_reward.testing.qwen.build_tiny_tokenizer`, with Qwen3's chat template) and
Z-Image-Turbo's scheduler config. It loads with ``ZImagePipeline.from_pretrained`` as the
real model does::

    >>> from diffusers import ZImagePipeline
    >>> path = build_tiny_z_image("/tmp/tiny-z-image")        # doctest: +SKIP
    >>> pipe = ZImagePipeline.from_pretrained(path)           # doctest: +SKIP

What is real: the VAE downsamples 8x and the transformer patchifies 2x2 (a 512x512 image is
1024 tokens), the text encoder's width is the transformer's ``cap_feat_dim`` and the
pipeline reads its second-to-last layer, the single-stream blocks with their noise and
context refiners. What is tiny: widths (32), one block of each kind, two text layers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paco_grpo.pipelines.z_image import Z_IMAGE_TURBO_SCHEDULER_CONFIG
from paco_grpo.testing.cases import PROMPTS, ParityCase, TinyCase

__all__ = ["TEST_CASES", "build_tiny_z_image", "tiny_z_image_components"]


# CFG (above a guidance of 0) against the empty prompt, as the pipeline's default
TEST_CASES = {
    "z_image": TinyCase(
        "recipes/grpo_zimage_tiny_cpu.yaml",
        ParityCase(PROMPTS[:1], (32, 48), 4.0, {"guidance_scale": 4.0, "max_sequence_length": 64},
                   {"max_sequence_length": 64}),
        max_sequence_length=64,
    ),
}  # fmt: skip
"""How the shared tests run the tiny Z-Image (:class:`~paco_grpo.testing.cases.TinyCase`)."""


def tiny_z_image_components(seed: int = 0, **transformer_overrides: Any) -> dict:
    """The components of a tiny ``ZImagePipeline`` (its keyword arguments);
    ``transformer_overrides`` update the ``ZImageTransformer2DModel`` config."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImageTransformer2DModel

    from paco_grpo.testing.flux import tiny_flux_vae
    from paco_grpo.testing.flux2 import (
        QWEN3_CHAT_TEMPLATE,
        TINY_TEXT_WIDTH,
        tiny_qwen3_text_encoder,
    )
    from paco_reward.testing.qwen import build_tiny_tokenizer

    torch.manual_seed(seed)
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    # the pipeline reads the second-to-last hidden state
    text_encoder = tiny_qwen3_text_encoder(tokenizer, num_hidden_layers=2)
    latent_channels = 4
    config = {
        "all_patch_size": (2,),
        "all_f_patch_size": (1,),
        "in_channels": latent_channels,
        "dim": 32,
        "n_layers": 1,
        "n_refiner_layers": 1,
        "n_heads": 2,
        "n_kv_heads": 2,
        "cap_feat_dim": TINY_TEXT_WIDTH,
        "axes_dims": (4, 6, 6),  # they sum to the head size, dim / n_heads
        "axes_lens": (1024, 64, 64),
    }
    config.update(transformer_overrides)
    return {
        "scheduler": FlowMatchEulerDiscreteScheduler(**Z_IMAGE_TURBO_SCHEDULER_CONFIG),
        "vae": tiny_flux_vae(latent_channels=latent_channels),
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "transformer": ZImageTransformer2DModel(**config),
    }


def build_tiny_z_image(output_dir: str | Path, seed: int = 0, **transformer_overrides) -> Path:
    """Write a randomly initialised tiny ``ZImagePipeline`` to ``output_dir``; returns the
    folder. ``transformer_overrides``: ``ZImageTransformer2DModel`` config fields. The same
    seed gives the same model.

    Example:
        >>> path = build_tiny_z_image("/tmp/tiny-z-image", seed=0)   # doctest: +SKIP
    """
    from diffusers import ZImagePipeline

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    ZImagePipeline(**tiny_z_image_components(seed, **transformer_overrides)).save_pretrained(
        output_dir
    )
    return output_dir
