"""The reward contract, a base class with the async twin and NaN accounting, and grid helpers.

A reward is a callable ``(images, prompts, metadata) -> np.ndarray`` of shape ``(n,)``; a
failed item is NaN (with a logged reason and a ``num_failed`` count), never 0.0. Every
reward here also has ``async acall(images, prompts, metadata)`` returning the same array:
rewards that talk to a server await their requests on the event loop, in-process ones run
their ``__call__`` in a worker thread. :func:`acall_reward` gives any plain callable the
same async face.

What may become NaN is narrow: the failures of an item's input (:data:`INPUT_ERRORS`: an
unreadable image, a layout or prompt that does not fit) and of the reward's service (a
:class:`~paco_reward.errors.RewardServerError`: the server stayed unreachable after its
retry policy, or answered badly). Anything else (a shape mismatch, a wrong dtype, an
out-of-memory error) is a bug or a broken machine and propagates as the exception it is.
The trainer then bounds the NaN share of an epoch (``max_failed_fraction``,
:mod:`paco_grpo.reward_failures`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from PIL import Image

from paco_reward.errors import InputError, InvalidImageError, LayoutError, PromptError
from paco_reward.grids import parse_layout, split_grid
from paco_reward.images import ImageInput, load_image

logger = logging.getLogger("paco_grpo.rewards")

__all__ = [
    "INPUT_ERRORS",
    "MODEL_DTYPES",
    "BaseReward",
    "Reward",
    "acall_reward",
    "check_scores",
    "model_dtype",
    "positive_int",
]

# The failures of one item's input, which score that item NaN (and nothing else).
INPUT_ERRORS = (InvalidImageError, LayoutError, PromptError)
# The dtypes a reward's model runs in, as its ``dtype`` argument names them.
MODEL_DTYPES = ("float32", "bfloat16", "float16")
# Reasons kept per reward between two reads of :meth:`BaseReward.pop_failure_reasons`.
MAX_REASONS = 5


class Reward(Protocol):
    """The reward contract: ``reward(images, prompts, metadata) -> np.ndarray`` of shape (n,)."""

    name: str

    def __call__(
        self, images: Sequence[ImageInput], prompts: Sequence[str], metadata: Sequence[dict]
    ) -> np.ndarray: ...


def check_scores(name: str, scores: Any, n: int) -> np.ndarray:
    """``scores`` as a float64 array of shape ``(n,)``; raises ``InputError`` naming the reward."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (n,):
        raise InputError(f"reward {name!r} returned shape {scores.shape}; expected ({n},).")
    return scores


def model_dtype(dtype: str):
    """The ``torch.dtype`` a reward's ``dtype`` argument names; ``InputError`` listing the
    choices (:data:`MODEL_DTYPES`) for any other value.

    Example:
        >>> model_dtype("bfloat16")
        torch.bfloat16
    """
    import torch

    if dtype not in MODEL_DTYPES:
        raise InputError(f"dtype must be one of {MODEL_DTYPES}; got {dtype!r}.")
    return getattr(torch, dtype)


def positive_int(name: str, value: object) -> int:
    """``value``, or an ``InputError`` naming ``name`` when it is not a positive integer (a
    bool is not).

    Example:
        >>> positive_int("batch_size", 8)
        8
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{name} must be a positive integer; got {value!r}.")
    return value


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
        self._reasons: list[str] = []  # the first reasons since the last pop_failure_reasons
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
        self.fail_items([k], reason)

    def fail_items(self, items: Sequence[int], reason: Any) -> None:
        """Record that ``items`` scored NaN for one reason (logged once: a server that is
        down fails a whole batch)."""
        if not items:
            return
        where = f"images[{items[0]}]" if len(items) == 1 else f"{len(items)} images"
        kind = f"{type(reason).__name__}: " if isinstance(reason, Exception) else ""
        with self._lock:
            self.num_failed += len(items)
            if len(self._reasons) < MAX_REASONS:
                self._reasons.append(f"{where}: {kind}{reason}")
        logger.warning("%s: %s scored NaN (%s).", self.name, where, reason)

    def pop_failure_reasons(self) -> list[str]:
        """The first reasons (at most 5) recorded since the last call, which clears them.

        Example:
            >>> reward = BaseReward()
            >>> reward.fail(3, "no layout")
            >>> reward.pop_failure_reasons(), reward.pop_failure_reasons()
            (['images[3]: no layout'], [])
        """
        with self._lock:
            reasons, self._reasons = self._reasons, []
        return reasons

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
