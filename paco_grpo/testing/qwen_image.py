"""Tiny, randomly initialised Qwen-Image pipelines built offline.

:func:`build_tiny_qwen_image` writes an ordinary diffusers folder with the four parts of
``Qwen/Qwen-Image``: a ``QwenImageTransformer2DModel``, an ``AutoencoderKLQwenImage``, a
Qwen2.5-VL text encoder with its tokenizer (the tiny evaluator model of
:func:`paco_reward.testing.qwen.build_tiny_qwen2_5_vl`, loaded back through
``from_pretrained``) and Qwen-Image's scheduler config. It loads with
``QwenImagePipeline.from_pretrained`` as the real model does::

    >>> from diffusers import QwenImagePipeline
    >>> path = build_tiny_qwen_image("/tmp/tiny-qwen-image")       # doctest: +SKIP
    >>> pipe = QwenImagePipeline.from_pretrained(path)             # doctest: +SKIP

The VAE downsamples 8x as the real one does (three levels; image sides are multiples of
16, a 32x32 image is 2x2 packed tokens), the transformer has one block, and the text
encoder's hidden size (64) is the transformer's ``joint_attention_dim``. The same
components, with a 32x VAE and a processor, make the tiny Qwen-Image-Edit of
:mod:`paco_grpo.testing.qwen_image_edit`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from paco_grpo.pipelines.qwen_image import QWEN_IMAGE_SCHEDULER_CONFIG
from paco_grpo.testing.cases import PROMPTS, ParityCase, TinyCase

__all__ = ["TEST_CASES", "build_tiny_qwen_image", "tiny_qwen_image_components"]


# one prompt: Qwen2.5-VL's padded batch rounds differently from one prompt alone
TEST_CASES = {
    "qwen_image": TinyCase(
        "recipes/grpo_qwen_image_tiny_cpu.yaml",
        ParityCase(PROMPTS[:1], (32, 48), 4.0, {"negative_prompt": " ", "true_cfg_scale": 4.0},
                   {"negative_prompt": " "}),
        max_sequence_length=64,  # the tiny tokenizer spends ~48 tokens on the prompt template
    ),
}  # fmt: skip
"""How the shared tests run the tiny Qwen-Image (:class:`~paco_grpo.testing.cases.TinyCase`)."""


def tiny_qwen_image_components(
    seed: int = 0, vae_levels: int = 3, **transformer_overrides: Any
) -> dict:
    """The components of a tiny Qwen-Image pipeline: ``scheduler``, ``vae``,
    ``text_encoder``, ``tokenizer``, ``transformer`` (``QwenImagePipeline``'s arguments) and
    the ``processor`` around the tokenizer that ``QwenImageEditPipeline`` takes too.

    Args:
        seed: seed of the random weights.
        vae_levels: the VAE downsamples ``2 ** vae_levels`` times (3: 8x, the real factor).
        **transformer_overrides: ``QwenImageTransformer2DModel`` config fields.
    """
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageTransformer2DModel,
    )
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration, Qwen2VLProcessor

    from paco_reward.testing.qwen import build_tiny_qwen2_5_vl

    z_dim = 4
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_qwen2_5_vl(Path(tmp) / "qwen-vl", seed=seed)
        text_encoder = Qwen2_5_VLForConditionalGeneration.from_pretrained(path)
        loaded = AutoProcessor.from_pretrained(path)
    # Qwen-Image-Edit ships a Qwen2VLProcessor around Qwen2.5-VL's tokenizer/image processor
    processor = Qwen2VLProcessor(
        image_processor=loaded.image_processor,
        tokenizer=loaded.tokenizer,
        video_processor=loaded.video_processor,
        chat_template=loaded.chat_template,
    )
    config = {
        "patch_size": 2,
        "in_channels": 4 * z_dim,
        "out_channels": z_dim,
        "num_layers": 1,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": text_encoder.config.text_config.hidden_size,
        "axes_dims_rope": (4, 6, 6),
    }
    config.update(transformer_overrides)
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(**config)
    vae = AutoencoderKLQwenImage(
        base_dim=8,
        z_dim=z_dim,
        dim_mult=[1] * (vae_levels + 1),
        num_res_blocks=1,
        temperal_downsample=[False] * vae_levels,
        latents_mean=[0.1, -0.2, 0.3, 0.0][:z_dim],
        latents_std=[1.5, 2.0, 1.0, 2.5][:z_dim],
    )
    return {
        "scheduler": FlowMatchEulerDiscreteScheduler(**QWEN_IMAGE_SCHEDULER_CONFIG),
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": processor.tokenizer,
        "processor": processor,
        "transformer": transformer,
    }


def build_tiny_qwen_image(
    output_dir: str | Path, seed: int = 0, **transformer_overrides: Any
) -> Path:
    """Write a randomly initialised tiny ``QwenImagePipeline`` to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary diffusers pipeline folder).
        seed: seed of the random weights; the same seed gives the same model.
        **transformer_overrides: ``QwenImageTransformer2DModel`` config fields.

    Returns:
        The folder, loadable with ``QwenImagePipeline.from_pretrained``.

    Example:
        >>> path = build_tiny_qwen_image("/tmp/tiny-qwen-image", seed=0)   # doctest: +SKIP
    """
    from diffusers import QwenImagePipeline

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    components = tiny_qwen_image_components(seed, **transformer_overrides)
    del components["processor"]  # the text-to-image pipeline has none
    QwenImagePipeline(**components).save_pretrained(output_dir)
    return output_dir
