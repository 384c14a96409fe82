"""``panel_colour_agreement``: a cheap reward a tiny policy can move (tests, the tiny recipe)."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from paco_grpo.rewards.base import BaseReward, grid_layout
from paco_reward.errors import LayoutError, PacoError
from paco_reward.images import ImageInput, load_image

__all__ = ["PanelColourAgreementReward"]


def _to_array(image: ImageInput, name: str) -> np.ndarray:
    """HWC float array in [0, 1]; float tensors are used as they are (no uint8 rounding)."""
    if type(image).__module__.startswith("torch") and image.ndim == 3 and image.is_floating_point():
        return image.detach().float().cpu().permute(1, 2, 0).numpy()
    return np.asarray(load_image(image, name), dtype=np.float64) / 255.0


class PanelColourAgreementReward(BaseReward):
    """Agreement of the panels' mean colours in a grid: ``1 - mean pairwise distance / sqrt(3)``.

    A cheap reward a policy can move; 1.0 when every panel has the same mean RGB colour.
    The layout comes from ``metadata["layout"]``, else the prompt, else ``layout``.

    Args:
        layout: the layout when neither ``metadata["layout"]`` nor the prompt names one.

    Example:
        >>> import torch
        >>> PanelColourAgreementReward()([torch.full((3, 32, 32), 0.5)], ["a 2x2 grid"], [{}])
        array([1.])
    """

    name = "panel_colour_agreement"

    def __init__(self, layout: str | None = None) -> None:
        super().__init__()
        self.layout = layout

    def score(self, images, prompts, metadata) -> np.ndarray:
        scores = np.full(len(images), np.nan)
        for k, (image, prompt, meta) in enumerate(zip(images, prompts, metadata)):
            try:
                rows, cols = grid_layout(prompt, meta, self.layout)
                array = _to_array(image, f"images[{k}]")
                h, w = array.shape[0] // rows, array.shape[1] // cols
                if h == 0 or w == 0:
                    raise LayoutError(f"image {array.shape[:2]} too small for a {rows}x{cols} grid")
                means = [
                    array[r * h : (r + 1) * h, c * w : (c + 1) * w].reshape(-1, 3).mean(0)
                    for r in range(rows)
                    for c in range(cols)
                ]
                dists = [np.linalg.norm(a - b) for a, b in combinations(means, 2)]
                scores[k] = 1.0 - (float(np.mean(dists)) if dists else 0.0) / math.sqrt(3.0)
            except (PacoError, ValueError) as err:
                self.fail(k, err)
        return scores
