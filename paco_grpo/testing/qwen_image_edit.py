"""Tiny, randomly initialised Qwen-Image-Edit-shaped pipelines built offline.

:func:`build_tiny_qwen_image_edit` writes an ordinary diffusers folder with the five parts
of ``Qwen/Qwen-Image-Edit``: a ``QwenImageTransformer2DModel``, an
``AutoencoderKLQwenImage``, a Qwen2.5-VL text encoder with its tokenizer and processor
(the tiny evaluator model of :func:`paco_reward.testing.qwen.build_tiny_model`, loaded back
through ``from_pretrained``), and Qwen-Image's scheduler config. It loads with
``QwenImageEditPipeline.from_pretrained`` as the real model does::

    >>> from diffusers import QwenImageEditPipeline
    >>> path = build_tiny_qwen_image_edit("/tmp/tiny-qwen-edit")    # doctest: +SKIP
    >>> pipe = QwenImageEditPipeline.from_pretrained(path)          # doctest: +SKIP

Shapes that differ from the real model on purpose: the VAE downsamples 32x (five
levels, no temporal downsampling) instead of 8x, so the 1024²-area reference that
``QwenImageEditPipeline`` always VAE-encodes is 32x32 latents and its mid-block
attention stays cheap on CPU; image sides are then multiples of 64. The transformer
has one block; the text encoder's hidden size (64) is the transformer's
``joint_attention_dim``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

__all__ = ["QWEN_IMAGE_SCHEDULER_CONFIG", "build_tiny_qwen_image_edit"]

# Qwen/Qwen-Image-Edit's scheduler/scheduler_config.json.
QWEN_IMAGE_SCHEDULER_CONFIG = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "invert_sigmas": False,
    "max_image_seq_len": 8192,
    "max_shift": 0.9,
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "shift_terminal": 0.02,
    "stochastic_sampling": False,
    "time_shift_type": "exponential",
    "use_beta_sigmas": False,
    "use_dynamic_shifting": True,
    "use_exponential_sigmas": False,
    "use_karras_sigmas": False,
}


def tiny_qwen_image_edit_components(seed: int = 0, **transformer_overrides: Any) -> dict:
    """The components of a tiny Qwen-Image-Edit pipeline (``QwenImageEditPipeline`` kwargs).

    ``transformer_overrides`` update the ``QwenImageTransformer2DModel`` config."""
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageTransformer2DModel,
    )
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration, Qwen2VLProcessor

    from paco_reward.testing.qwen import build_tiny_model

    z_dim = 4
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(Path(tmp) / "qwen-vl", seed=seed)
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
        dim_mult=[1, 1, 1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False] * 5,
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


def build_tiny_qwen_image_edit(
    output_dir: str | Path, seed: int = 0, **transformer_overrides: Any
) -> Path:
    """Write a randomly initialised tiny ``QwenImageEditPipeline`` to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary diffusers pipeline folder).
        seed: seed of the random weights; the same seed gives the same model.
        **transformer_overrides: ``QwenImageTransformer2DModel`` config fields.

    Returns:
        The folder, loadable with ``QwenImageEditPipeline.from_pretrained``.

    Example:
        >>> path = build_tiny_qwen_image_edit("/tmp/tiny-qwen-edit", seed=0)   # doctest: +SKIP
    """
    from diffusers import QwenImageEditPipeline

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    pipe = QwenImageEditPipeline(**tiny_qwen_image_edit_components(seed, **transformer_overrides))
    pipe.save_pretrained(output_dir)
    return output_dir
