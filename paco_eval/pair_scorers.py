"""Pair scorers of the judge benchmarks (ConsistencyRank, EditReward-Bench): a PaCo evaluator
with a fixed template, or an image-similarity baseline (CLIP-I, pixel, DreamSim).

Every scorer has ``score_pairs([(a, b, prompt), ...]) -> np.ndarray``; a PaCo evaluator also
has ``score_edit_batch`` (EditReward-Bench's three dimensions, exactly as
:meth:`paco_reward.PacoReward.score_edit`). The ``--judge`` kinds ``clip:``, ``pixel`` and
``dreamsim`` of :mod:`paco_eval.judges` build the baselines here; ``python -m
benchmarks.consistency_rank``'s ``--scorer`` specs build the same objects.

    >>> scorer = build_baseline("pixel", "")
    >>> type(scorer).__name__
    'PixelScorer'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from paco_eval.judges import pixel_size
from paco_reward.errors import ConfigError
from paco_reward.templates import get_template

__all__ = ["BASELINE_KINDS", "PacoPairScorer", "build_baseline"]

#: The image-similarity baselines, by judge kind.
BASELINE_KINDS = ("clip", "pixel", "dreamsim")


class PacoPairScorer:
    """A :class:`paco_reward.PacoReward` used with a fixed instruction template, plus the
    editing scores (``score_edit_batch``) EditReward-Bench needs.

    Args:
        reward: the PacoReward (in-process or remote).
        template: template for :meth:`score_pairs` (ConsistencyRank uses ``"rank"``).
        name: display name.
    """

    def __init__(self, reward: Any, template: str = "rank", name: str = "PaCo-Reward") -> None:
        self.reward = reward
        self.template = template
        self.name = name

    def score_pairs(self, pairs: Sequence[tuple]) -> np.ndarray:
        """``PacoReward.score_pairs(pairs, template=self.template)``; the benchmark's prompt is
        passed on only when the template takes one (``rank`` is theme-free)."""
        if not get_template(self.template).needs_prompt:
            pairs = [tuple(pair[:2]) for pair in pairs]
        return np.asarray(self.reward.score_pairs(pairs, template=self.template), np.float64)

    def score_edit_batch(self, triples: Sequence[tuple]) -> dict[str, np.ndarray]:
        """Edit scores of ``(source, edited, instruction)`` triples exactly as
        :meth:`paco_reward.PacoReward.score_edit` computes them (templates
        ``edit_consistency`` and ``edit_following``, overall = sqrt(SC * PF)), batched."""
        pairs = [(src, out, instr) for src, out, instr in triples]
        sc = np.asarray(self.reward.score_pairs(pairs, template="edit_consistency"), np.float64)
        pf = np.asarray(self.reward.score_pairs(pairs, template="edit_following"), np.float64)
        return {"consistency": sc, "prompt_following": pf, "overall": np.sqrt(sc * pf)}


def build_baseline(kind: str, arg: str, device: str | None = None) -> Any:
    """The baseline scorer of ``kind`` (one of :data:`BASELINE_KINDS`) with its argument:
    ``clip`` a CLIP folder or hub id, ``pixel`` an optional size, ``dreamsim`` an optional
    weights cache folder (default ``./models``).

    Raises:
        ConfigError: an unknown kind or a missing CLIP model.
    """
    if kind == "clip":
        if not arg:
            raise ConfigError("clip: needs its model: clip:<CLIP folder or hub id>.")
        from paco_reward.baselines import CLIPImageScorer

        return CLIPImageScorer(arg, device)
    if kind == "pixel":
        from paco_reward.baselines import PixelScorer

        size = pixel_size(arg)
        return PixelScorer(size) if size else PixelScorer()
    if kind == "dreamsim":
        from paco_reward.baselines import DreamSimScorer

        return DreamSimScorer(arg or "./models", device=device)
    raise ConfigError(f"no baseline {kind!r}; baselines are {list(BASELINE_KINDS)}.")
