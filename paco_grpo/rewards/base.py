"""The reward contract, a base class with the async twin and NaN accounting, and grid helpers.

A reward is a callable ``(images, prompts, metadata) -> np.ndarray`` of shape ``(n,)``; a
failed item is NaN (with a logged reason and a ``num_failed`` count), never 0.0. Every
reward here also has ``async acall(images, prompts, metadata)`` returning the same array:
rewards that talk to a server await their requests on the event loop, in-process ones run
their ``__call__`` in a worker thread. :func:`acall_reward` gives any plain callable the
same async face.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from PIL import Image

from paco_reward.errors import InputError, LayoutError
from paco_reward.grids import parse_layout, split_grid
from paco_reward.images import ImageInput, load_image

logger = logging.getLogger("paco_grpo.rewards")

__all__ = ["BaseReward", "Reward", "acall_reward", "check_scores"]


class Reward(Protocol):
    """The reward contract: ``reward(images, prompts, metadata) -> np.ndarray`` of shape (n,)."""

    name: str

    def __call__(
        self, images: Sequence[ImageInput], prompts: Sequence[str], metadata: Sequence[dict]
    ) -> np.ndarray: ...


def check_scores(name: str, scores: Any, n: int) -> np.ndarray:
    """``scores`` as a float64 array of shape ``(n,)``; raises ``ValueError`` naming the reward."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (n,):
        raise InputError(f"reward {name!r} returned shape {scores.shape}; expected ({n},).")
    return scores


async def acall_reward(reward: Any, images, prompts, metadata) -> np.ndarray:
    """Await ``reward.acall(...)`` when the reward has one, else run ``reward(...)`` in a thread.

    Example:
        >>> import asyncio, numpy as np
        >>> asyncio.run(acall_reward(lambda i, p, m: np.ones(len(i)), [0, 1], ["a", "b"], [{}, {}]))
        array([1., 1.])
    """
    acall = getattr(reward, "acall", None)
    if acall is not None:
        return await acall(images, prompts, metadata)
    return await asyncio.to_thread(reward, images, prompts, metadata)


class BaseReward:
    """Base of the built-in rewards: argument checks, per-item failure accounting, ``acall``.

    Subclasses implement :meth:`score` (the batch, returning ``(n,)`` with NaN for failed
    items, calling :meth:`fail` for each) and, when they can do better than a worker
    thread, :meth:`ascore`.
    """

    name = "reward"

    def __init__(self) -> None:
        self.num_failed = 0  # items scored NaN since construction
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ contract
    def __call__(
        self, images: Sequence[ImageInput], prompts: Sequence[str], metadata: Sequence[dict] | None
    ) -> np.ndarray:
        images, prompts, metadata = self._check_args(images, prompts, metadata)
        return check_scores(self.name, self.score(images, prompts, metadata), len(images))

    async def acall(
        self, images: Sequence[ImageInput], prompts: Sequence[str], metadata: Sequence[dict] | None
    ) -> np.ndarray:
        """Async twin of ``__call__``: the same scores, awaited."""
        images, prompts, metadata = self._check_args(images, prompts, metadata)
        scores = await self.ascore(images, prompts, metadata)
        return check_scores(self.name, scores, len(images))

    def score(self, images: list, prompts: list[str], metadata: list[dict]) -> np.ndarray:
        raise NotImplementedError

    async def ascore(self, images: list, prompts: list[str], metadata: list[dict]) -> np.ndarray:
        """Default: :meth:`score` in a worker thread (in-process models release the GIL)."""
        return await asyncio.to_thread(self.score, images, prompts, metadata)

    # ------------------------------------------------------------------ helpers
    def _check_args(self, images, prompts, metadata):
        images, prompts = list(images), list(prompts)
        metadata = [dict(m or {}) for m in metadata] if metadata is not None else [{}] * len(images)
        if not len(images) == len(prompts) == len(metadata):
            raise InputError(
                f"{self.name}: got {len(images)} images, {len(prompts)} prompts and "
                f"{len(metadata)} metadata dicts; pass one of each per image."
            )
        return images, prompts, metadata

    def fail(self, k: int, reason: Any) -> None:
        """Record that item ``k`` scored NaN, logging why."""
        with self._lock:
            self.num_failed += 1
        logger.warning("%s: images[%d] scored NaN (%s).", self.name, k, reason)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def grid_layout(prompt: str, meta: dict, layout: str | tuple[int, int] | None) -> tuple[int, int]:
    """``(rows, cols)`` from ``meta["layout"]``, else the prompt's own, else ``layout`` (the
    reward's explicit setting); :class:`LayoutError` when none names one."""
    if meta.get("layout"):
        return parse_layout(meta["layout"])
    try:
        return parse_layout(prompt)
    except LayoutError:
        if layout is None:
            raise LayoutError(
                f"no grid layout for {prompt[:80]!r}: pass metadata['layout'], name it in the "
                "prompt ('2x2') or give the reward layout=..."
            ) from None
    return parse_layout(layout)


def grid_panels(
    image: ImageInput, prompt: str, meta: dict, default_layout, k: int
) -> list[Image.Image]:
    """Cut ``image`` into its panels (row-major RGB PIL images)."""
    rows, cols = grid_layout(prompt, meta, default_layout)
    return split_grid(load_image(image, f"images[{k}]"), rows, cols, f"images[{k}]")
