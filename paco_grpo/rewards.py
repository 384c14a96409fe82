"""Rewards for PaCo-GRPO: one contract, one registry.

A reward is a callable ``(images, prompts, metadata) -> np.ndarray`` of shape ``(n,)``:

- ``images``: n images (float CHW tensors in [0, 1] from the trainer, or anything
  :func:`paco_reward.images.load_image` accepts);
- ``prompts``: the n prompt texts;
- ``metadata``: n dicts from the prompt file (``layout``, ``theme``, ``criteria``, ...).

A failed item is NaN (logged with its reason), never 0.0. Recipe names resolve to
reward classes in :data:`REWARDS` through :func:`build_reward` at the CLI edge; an
unknown name raises listing the valid ones.

    >>> import torch
    >>> reward = build_reward("panel_colour_agreement")
    >>> reward([torch.full((3, 32, 32), 0.5)], ["a grid, 2x2"], [{}]).round(3)
    array([1.])
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from data_pipeline.grids import parse_layout, split_grid, split_panel_prompts
from paco_reward.errors import PacoError
from paco_reward.images import ImageInput, load_image

logger = logging.getLogger(__name__)

__all__ = [
    "REWARDS",
    "ConsistencyReward",
    "PanelColourAgreementReward",
    "Reward",
    "build_reward",
    "build_rewards",
]


class Reward(Protocol):
    """The reward contract."""

    name: str

    def __call__(
        self, images: Sequence[ImageInput], prompts: Sequence[str], metadata: Sequence[dict]
    ) -> np.ndarray: ...


def _layout(prompt: str, meta: dict, default: str | tuple[int, int] | None) -> tuple[int, int]:
    if meta.get("layout"):
        return parse_layout(meta["layout"])
    if default is not None:
        return parse_layout(default)
    return parse_layout(prompt)


def _to_array(image: ImageInput, name: str) -> np.ndarray:
    """HWC float array in [0, 1]; float tensors are used as they are (no uint8 rounding)."""
    if type(image).__module__.startswith("torch") and image.ndim == 3 and image.is_floating_point():
        return image.detach().float().cpu().permute(1, 2, 0).numpy()
    return np.asarray(load_image(image, name), dtype=np.float64) / 255.0


class PanelColourAgreementReward:
    """Agreement of the panels' mean colours in a grid: ``1 - mean pairwise distance / sqrt(3)``.

    A cheap reward a policy can move; 1.0 when every panel has the same mean RGB colour.
    The layout comes from ``metadata["layout"]``, else ``layout``, else the prompt.

    Args:
        layout: default layout such as ``"2x2"`` (``None``: read it from the prompt).
    """

    name = "panel_colour_agreement"

    def __init__(self, layout: str | None = "2x2") -> None:
        self.layout = layout

    def __call__(self, images, prompts, metadata) -> np.ndarray:
        scores = np.full(len(images), np.nan)
        for k, (image, prompt, meta) in enumerate(zip(images, prompts, metadata)):
            try:
                rows, cols = _layout(prompt, meta or {}, self.layout)
                array = _to_array(image, f"images[{k}]")
                h, w = array.shape[0] // rows, array.shape[1] // cols
                if h == 0 or w == 0:
                    raise PacoError(f"image {array.shape[:2]} too small for a {rows}x{cols} grid")
                means = [
                    array[r * h : (r + 1) * h, c * w : (c + 1) * w].reshape(-1, 3).mean(0)
                    for r in range(rows)
                    for c in range(cols)
                ]
                dists = [np.linalg.norm(a - b) for a, b in combinations(means, 2)]
                scores[k] = 1.0 - (float(np.mean(dists)) if dists else 0.0) / math.sqrt(3.0)
            except (PacoError, ValueError) as err:
                logger.warning("panel_colour_agreement: images[%d] scored NaN (%s).", k, err)
        return scores


class ConsistencyReward:
    """PaCo-Reward consistency of a grid: the mean pairwise score of its panels (``score_grid``).

    Args:
        model: a :class:`paco_reward.PacoReward`, or a model folder / hub id to load with
            ``PacoReward.from_pretrained``.
        adapter: optional LoRA adapter for ``model`` when it is a path.
        layout: default layout when ``metadata`` has none (``None``: from the prompt).
        symmetric: score both panel orders.
        template: instruction template name (default: the evaluator's).
        **load_kwargs: passed to ``PacoReward.from_pretrained`` (device, dtype, batch_size).

    Example:
        >>> reward = ConsistencyReward("X-GenGroup/PaCo-Reward-7B")       # doctest: +SKIP
        >>> reward(grids, prompts, [{"layout": "2x2"}] * len(grids))    # doctest: +SKIP
    """

    name = "consistency"

    def __init__(
        self,
        model: Any = "X-GenGroup/PaCo-Reward-7B",
        adapter: str | None = None,
        layout: str | None = "2x2",
        symmetric: bool = False,
        template: str | None = None,
        **load_kwargs: Any,
    ) -> None:
        from paco_reward import PacoReward

        if isinstance(model, (str, Path)):
            model = PacoReward.from_pretrained(model, adapter=adapter, **load_kwargs)
        self.evaluator = model
        self.layout = layout
        self.symmetric = symmetric
        self.template = template

    def __call__(self, images, prompts, metadata) -> np.ndarray:
        scores = np.full(len(images), np.nan)
        for k, (image, prompt, meta) in enumerate(zip(images, prompts, metadata)):
            try:
                rows, cols = _layout(prompt, meta or {}, self.layout)
                panels = split_grid(load_image(image, f"images[{k}]"), rows, cols, f"images[{k}]")
                result = self.evaluator.score_set(
                    panels,
                    split_panel_prompts(prompt)[0],
                    template=self.template,
                    symmetric=self.symmetric,
                )
                scores[k] = result.mean
            except (PacoError, ValueError) as err:
                logger.warning("consistency: images[%d] scored NaN (%s).", k, err)
        return scores


REWARDS: dict[str, type] = {
    "consistency": ConsistencyReward,
    "panel_colour_agreement": PanelColourAgreementReward,
}


def build_reward(name: str, **kwargs: Any) -> Reward:
    """Instantiate the reward registered as ``name`` with ``kwargs``.

    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    if name not in REWARDS:
        raise ValueError(f"Unknown reward {name!r}; valid rewards: {sorted(REWARDS)}.")
    return REWARDS[name](**kwargs)


def build_rewards(
    weights: dict[str, float], reward_kwargs: dict[str, dict] | None = None
) -> dict[str, Reward]:
    """``{name: reward}`` for every name in ``weights`` (checked before anything loads)."""
    reward_kwargs = reward_kwargs or {}
    unknown = sorted(set(weights) - set(REWARDS))
    if unknown:
        raise ValueError(f"Unknown reward(s) {unknown}; valid rewards: {sorted(REWARDS)}.")
    return {name: build_reward(name, **reward_kwargs.get(name, {})) for name in weights}
