"""A tiny DINOv3 ViT (GARDO's feature model family) built offline, saved as a
``transformers`` folder that :class:`paco_grpo.features.ImageFeatures` loads.

    >>> path = build_tiny_dinov3("/tmp/tiny-dinov3")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["build_tiny_dinov3"]


def build_tiny_dinov3(output_dir: str | Path, seed: int = 0, image_size: int = 32) -> Path:
    """A 2-layer, 32-wide DINOv3 ViT with patch 8 and its image processor at
    ``image_size`` pixels, random weights from ``seed``; returns the folder."""
    from transformers import DINOv3ViTConfig, DINOv3ViTImageProcessor, DINOv3ViTModel

    output_dir = Path(output_dir)
    torch.manual_seed(seed)
    config = DINOv3ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        patch_size=8,
        image_size=image_size,
        num_register_tokens=0,
    )
    DINOv3ViTModel(config).eval().save_pretrained(output_dir)
    size = {"height": image_size, "width": image_size}
    DINOv3ViTImageProcessor(size=size).save_pretrained(output_dir)
    return output_dir
