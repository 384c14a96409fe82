"""Image features for the diversity signals and GARDO's diversity-aware advantage: one
vision model loaded through ``transformers`` (``AutoModel`` + ``AutoImageProcessor``), its
pooled output L2-normalised.

GARDO uses DINOv3 ViT-L/16 (``facebook/dinov3-vitl16-pretrain-lvd1689m`` in transformers,
:data:`DEFAULT_FEATURE_MODEL`); any model whose output has ``pooler_output`` (or a
``last_hidden_state`` whose first token summarises the image) works. Tests build a tiny
DINOv3 offline (:func:`paco_grpo.testing.features.build_tiny_dinov3`).

    >>> features = ImageFeatures.from_pretrained("facebook/dinov3-vitl16-pretrain-lvd1689m")  # doctest: +SKIP
    >>> features(images).shape  # doctest: +SKIP
    (16, 1024)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paco_reward.images import load_image

__all__ = ["DEFAULT_FEATURE_MODEL", "ImageFeatures"]

DEFAULT_FEATURE_MODEL = "facebook/dinov3-vitl16-pretrain-lvd1689m"


class ImageFeatures:
    """A frozen vision model that maps images to L2-normalised feature rows.

    Args:
        model: the loaded ``transformers`` vision model.
        processor: its image processor.
        device: where the model runs.
        batch_size: images per forward pass.
    """

    def __init__(self, model, processor, device="cpu", batch_size: int = 16) -> None:
        self.model = model.eval().requires_grad_(False)
        self.processor = processor
        self.device = torch.device(device)
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, device="cpu", dtype: str = "float32", **kwargs
    ) -> ImageFeatures:
        """Load ``name_or_path`` (a folder or hub id) with ``AutoModel`` /
        ``AutoImageProcessor``; ``kwargs`` go to both ``from_pretrained`` calls."""
        from transformers import AutoImageProcessor, AutoModel

        model = AutoModel.from_pretrained(name_or_path, dtype=getattr(torch, dtype), **kwargs)
        processor = AutoImageProcessor.from_pretrained(name_or_path, **kwargs)
        return cls(model.to(device), processor, device)

    @torch.inference_mode()
    def __call__(self, images) -> np.ndarray:
        """``(n, d)`` float64 L2-normalised features of images (anything
        :func:`paco_reward.images.load_image` reads: float CHW tensors in [0, 1], PIL, ...)."""
        pil = [load_image(im) for im in images]
        rows = []
        dtype = next(self.model.parameters()).dtype
        for s in range(0, len(pil), self.batch_size):
            pixels = self.processor(images=pil[s : s + self.batch_size], return_tensors="pt")
            out = self.model(pixel_values=pixels["pixel_values"].to(self.device, dtype))
            pooled = getattr(out, "pooler_output", None)
            if pooled is None:
                pooled = out.last_hidden_state[:, 0]
            rows.append(pooled.float().cpu().numpy().astype(np.float64))
        f = np.concatenate(rows) if rows else np.zeros((0, 0))
        return f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
