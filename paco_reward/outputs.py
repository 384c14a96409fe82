"""Result types returned by :class:`paco_reward.PacoReward`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SetScore:
    """Pairwise consistency of a set of n images.

    Attributes:
        matrix: n x n, symmetric; ``matrix[i, j]`` is the score of pair (i, j) (averaged over
            both orders when scored symmetrically); the diagonal is NaN.
        mean: mean over the n(n-1)/2 unordered pairs (n >= 2: ``score_set`` refuses fewer).
        pairs: the unordered pairs (i < j) in scoring order.
        scores: their scores, aligned with ``pairs``.
    """

    matrix: np.ndarray
    mean: float
    pairs: list[tuple[int, int]]
    scores: np.ndarray


@dataclass(frozen=True)
class Ranking:
    """Candidates ranked by consistency with a reference: ``order[0]`` is the index of the
    most consistent candidate. Equal scores keep input order (stable sort)."""

    order: list[int]
    scores: np.ndarray


@dataclass(frozen=True)
class Judgement:
    """A generated judgement. ``score`` is the same number :meth:`PacoReward.score` returns;
    ``answer`` is the first word the model wrote ("Yes"/"No"/other) and ``reasons`` the rest."""

    score: float
    answer: str
    reasons: str
    text: str


@dataclass(frozen=True)
class EditScore:
    """Editing reward: semantic consistency (SC), prompt following (PF) and
    ``overall = sqrt(SC * PF)``."""

    consistency: float
    prompt_following: float
    overall: float
