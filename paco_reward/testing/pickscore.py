"""A tiny PickScore-style model built offline, for the ``pickscore`` reward's tests and demo.

PickScore (``yuvalkirstain/PickScore_v1``) is a fine-tuned ``CLIPModel`` whose score is
``exp(logit_scale) * cosine(image, text)`` with ``exp(logit_scale) = 100``. The tiny
version is a randomly initialised tiny CLIP (:func:`paco_reward.testing.clip.build_tiny_clip`)
with that logit scale, saved with its processor in one folder, so it loads exactly as the
real checkpoint plus its processor would::

    >>> from paco_reward.testing.pickscore import build_tiny_pickscore
    >>> path = build_tiny_pickscore("/tmp/tiny-pickscore")          # doctest: +SKIP
    >>> PickScoreReward(path, processor=path)                        # doctest: +SKIP
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from paco_reward.testing.clip import build_tiny_clip

__all__ = ["build_tiny_pickscore"]

PICKSCORE_LOGIT_SCALE = 100.0  # exp(logit_scale) of PickScore_v1 (and of CLIP after training)


def build_tiny_pickscore(
    output_dir: str | Path, seed: int = 1, image_size: int = 32, **overrides: Any
) -> Path:
    """Write a tiny PickScore-style ``CLIPModel`` + ``CLIPProcessor`` folder to ``output_dir``.

    Args:
        output_dir: folder to create.
        seed: seed of the random weights.
        image_size: input resolution of the vision tower.
        **overrides: as for :func:`~paco_reward.testing.clip.build_tiny_clip`.

    Returns:
        The folder (model and processor), loadable with ``CLIPModel.from_pretrained``.

    Example:
        >>> path = build_tiny_pickscore("/tmp/tiny-pickscore")   # doctest: +SKIP
    """
    overrides.setdefault("logit_scale_init_value", math.log(PICKSCORE_LOGIT_SCALE))
    return build_tiny_clip(output_dir, seed=seed, image_size=image_size, **overrides)
