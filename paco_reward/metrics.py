"""Human-alignment metrics: ranking agreement (ConsistencyRank) and pairwise accuracy
(EditReward-Bench).

Ranking metrics
---------------
An item has ``n >= 2`` candidates scored against one reference and a human order
``h`` (``h[k]`` is the index of the candidate people put at position ``k``, best
first). The scorer's order ``p`` sorts candidates by score, highest first.

**Ties** in scores are broken deterministically: with ``ties="first"`` (default) the
candidate with the lower index comes first (a stable sort of ``-scores``, the same
rule as :meth:`paco_reward.PacoReward.rank`); with ``ties="last"`` the higher index
comes first: a stable ascending sort, reversed. That is what the released PaCo-RL
evaluator's ``np.argsort(scores)[::-1]`` gives under numpy 1.x for n <= 16 candidates
(its default sort is then an insertion sort, which is stable). Its order among equal
scores is otherwise unspecified: numpy 2.x dispatches to SIMD sorts that are not stable
even at n = 4 on some CPUs (``np.argsort([1, 1, 0, 0])`` gave ``[3, 2, 1, 0]`` here), so no
rule reproduces the released numbers on tied items everywhere. :func:`ranking_metrics`
counts the items with tied scores (``n_tied``) so a reader sees when this matters.

With ``r_h[i]`` / ``r_p[i]`` the position (0 = best) of candidate ``i`` in ``h`` / ``p``:

- ``accuracy``: fraction of positions ``k`` with ``p[k] == h[k]``.
- ``kendall_tau``: Kendall's tau between the rank vectors ``r_h`` and ``r_p``
  (concordant minus discordant candidate pairs over ``n(n-1)/2``; no ties remain).
- ``spearman_rho``: Spearman's rho between ``r_h`` and ``r_p``,
  ``1 - 6 sum (r_h - r_p)^2 / (n (n^2 - 1))``.
- ``top1_bottom1``: ``([p[0] == h[0]] + [p[-1] == h[-1]]) / 2``.
- ``footrule``: Spearman's footrule distance ``sum_i |r_h[i] - r_p[i]|`` (0 is perfect;
  lower is better; the released evaluator's ``footrule_distance``).
- ``kendall_tau_ref`` / ``spearman_rho_ref``: the released PaCo-RL evaluator's
  definitions, which correlate the two *orderings* ``h`` and ``p`` themselves (the
  inverse permutations of the rank vectors). For 4 candidates they differ from the
  standard values in 328 of the 576 (human, predicted) pairs of permutations. The
  paper's ConsistencyRank numbers use these.

:func:`ranking_metrics` averages every metric over items.

    >>> m = ranking_metrics([[0.9, 0.1, 0.5, 0.3]], [[0, 2, 3, 1]])
    >>> m["accuracy"], m["kendall_tau"], m["top1_bottom1"]
    (1.0, 1.0, 1.0)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from paco_reward.errors import InputError

logger = logging.getLogger(__name__)

RANKING_METRICS = (
    "accuracy",
    "kendall_tau",
    "spearman_rho",
    "top1_bottom1",
    "footrule",
    "kendall_tau_ref",
    "spearman_rho_ref",
)
TIE_RULES = ("first", "last")


def predicted_order(scores: Sequence[float] | np.ndarray, ties: str = "first") -> list[int]:
    """Candidate indices sorted by score, highest first, with deterministic tie-breaking.

    Args:
        scores: one finite score per candidate.
        ties: ``"first"`` (lower index wins a tie) or ``"last"`` (higher index wins, as
            the released evaluator's ``np.argsort(scores)[::-1]``).

    Example:
        >>> predicted_order([0.2, 0.7, 0.7]), predicted_order([0.2, 0.7, 0.7], ties="last")
        ([1, 2, 0], [2, 1, 0])
    """
    if ties not in TIE_RULES:
        raise InputError(f"ties={ties!r} is not a tie rule; use one of {TIE_RULES}.")
    values = np.asarray(scores, dtype=np.float64)
    if ties == "first":
        return [int(i) for i in np.argsort(-values, kind="stable")]
    return [int(i) for i in np.argsort(values, kind="stable")[::-1]]


def _check_order(order: Sequence[int], n: int, name: str) -> list[int]:
    values = [int(v) for v in order]
    if sorted(values) != list(range(n)):
        raise InputError(
            f"{name}={list(order)!r} is not an ordering of the {n} candidates; it must list "
            f"each index 0..{n - 1} exactly once, best first."
        )
    return values


def _positions(order: Sequence[int]) -> np.ndarray:
    positions = np.empty(len(order), dtype=np.int64)
    positions[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    return positions


def _kendall(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau of two tie-free sequences (scipy's tau-b, which is tau-a without ties)."""
    from scipy.stats import kendalltau

    return float(kendalltau(x, y).statistic)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho of two permutations of 0..n-1 (scipy's)."""
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def item_ranking_metrics(
    scores: Sequence[float] | np.ndarray,
    human_order: Sequence[int],
    ties: str = "first",
) -> dict[str, float]:
    """All ranking metrics of one item (see the module docstring for definitions).

    Args:
        scores: the scorer's score of each candidate (finite).
        human_order: candidate indices, best first, as people ranked them.
        ties: tie rule of :func:`predicted_order`.

    Raises:
        ValueError: fewer than 2 candidates, a non-finite score, or a ``human_order``
            that is not a permutation of the candidate indices.

    Example:
        >>> item_ranking_metrics([0.1, 0.2, 0.3], [2, 1, 0])["spearman_rho"]
        1.0
    """
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    n = len(values)
    if n < 2:
        raise InputError(f"An item needs at least 2 candidates to rank; got {n} score(s).")
    if not np.isfinite(values).all():
        raise InputError(
            f"scores={values.tolist()} contain NaN/inf; drop the item or fix the scorer "
            "(ranking_metrics skips such items and counts them in 'n_skipped')."
        )
    human = _check_order(human_order, n, "human_order")
    pred = predicted_order(values, ties)
    r_h, r_p = _positions(human), _positions(pred)
    h, p = np.asarray(human, dtype=np.int64), np.asarray(pred, dtype=np.int64)
    return {
        "accuracy": float(np.mean(h == p)),
        "kendall_tau": _kendall(r_h, r_p),
        "spearman_rho": _spearman(r_h, r_p),
        "top1_bottom1": (float(p[0] == h[0]) + float(p[-1] == h[-1])) / 2.0,
        "footrule": float(np.abs(r_h - r_p).sum()),
        "kendall_tau_ref": _kendall(h, p),
        "spearman_rho_ref": _spearman(h, p),
        "tied": float(has_tied_scores(values)),
    }


def ranking_metrics(
    scores: Sequence[Sequence[float]] | np.ndarray,
    human_order: Sequence[Sequence[int]],
    ties: str = "first",
) -> dict[str, float]:
    """Ranking metrics averaged over items.

    Args:
        scores: per item, one score per candidate (items may have different sizes).
        human_order: per item, the human order of its candidates (indices, best first).
        ties: tie rule, ``"first"`` (default) or ``"last"``; see :func:`predicted_order`.

    Returns:
        ``{metric: mean over items}`` for every name in :data:`RANKING_METRICS`, plus
        ``n_items`` (items averaged), ``n_skipped`` (items skipped because a score was
        NaN/inf; each is logged) and ``n_tied`` (items with tied scores, ordered by ``ties``).
        With no usable item every metric is NaN.

    Raises:
        ValueError: mismatched lengths, or an invalid item (see :func:`item_ranking_metrics`).

    Example:
        >>> ranking_metrics([[3, 2, 1, 0], [0, 1, 2, 3]], [[0, 1, 2, 3], [0, 1, 2, 3]])["kendall_tau"]
        0.0
    """
    if len(scores) != len(human_order):
        raise InputError(
            f"scores has {len(scores)} items but human_order has {len(human_order)}; "
            "pass one human order per item."
        )
    per_item: list[dict[str, float]] = []
    skipped = 0
    for k, (item_scores, order) in enumerate(zip(scores, human_order)):
        values = np.asarray(item_scores, dtype=np.float64).reshape(-1)
        if len(values) >= 2 and not np.isfinite(values).all():
            logger.warning("ranking_metrics: item %d has non-finite scores %s; skipped.", k, values)
            skipped += 1
            continue
        try:
            per_item.append(item_ranking_metrics(values, order, ties))
        except ValueError as err:
            raise InputError(f"item {k}: {err}") from None
    return average_metrics(per_item, n_skipped=skipped)


def has_tied_scores(scores: Sequence[float] | np.ndarray) -> bool:
    """Whether two candidates share a score (their order then depends on the tie rule).

    Example:
        >>> has_tied_scores([0.2, 0.7, 0.7]), has_tied_scores([0.2, 0.7])
        (True, False)
    """
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    return len(np.unique(values)) < len(values)


def average_metrics(per_item: Sequence[dict[str, float]], n_skipped: int = 0) -> dict[str, float]:
    """Mean of per-item metric dicts (as returned by :func:`item_ranking_metrics`), with
    ``n_items``, ``n_skipped`` and ``n_tied`` (items whose scores tie); NaN metrics when
    ``per_item`` is empty."""
    result: dict[str, float] = {
        name: (float(np.mean([m[name] for m in per_item])) if per_item else math.nan)
        for name in RANKING_METRICS
    }
    result["n_items"] = len(per_item)
    result["n_skipped"] = n_skipped
    result["n_tied"] = int(sum(m.get("tied", 0.0) for m in per_item))
    return result


# ---------------------------------------------------------------------- pairwise accuracy
def pairwise_correct(
    preferred: Sequence[float] | np.ndarray,
    other: Sequence[float] | np.ndarray,
    strict: bool = True,
) -> np.ndarray:
    """Per pair: 1.0 if the human-preferred output scored higher (``strict``: ``>``) or
    at least as high (``strict=False``: ``>=``) than the other one, 0.0 if not, NaN if
    either score is NaN.

    Example:
        >>> pairwise_correct([0.9, 0.5, 0.2], [0.1, 0.5, 0.4]).tolist()
        [1.0, 0.0, 0.0]
        >>> pairwise_correct([0.9, 0.5, 0.2], [0.1, 0.5, 0.4], strict=False).tolist()
        [1.0, 1.0, 0.0]
    """
    a = np.asarray(preferred, dtype=np.float64).reshape(-1)
    b = np.asarray(other, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise InputError(
            f"preferred has {a.size} scores but other has {b.size}; pass one score per pair in each."
        )
    with np.errstate(invalid="ignore"):
        correct = (a > b) if strict else (a >= b)
    out = correct.astype(np.float64)
    out[np.isnan(a) | np.isnan(b)] = np.nan
    return out


def pairwise_accuracy(
    preferred: Sequence[float] | np.ndarray,
    other: Sequence[float] | np.ndarray,
    strict: bool = True,
) -> float:
    """Fraction of pairs in which the human-preferred output wins (see :func:`pairwise_correct`).

    Pairs with a NaN score are left out (and logged); NaN when no pair is left.

    Example:
        >>> pairwise_accuracy([0.9, 0.5], [0.1, 0.5]), pairwise_accuracy([0.9, 0.5], [0.1, 0.5], strict=False)
        (0.5, 1.0)
    """
    correct = pairwise_correct(preferred, other, strict)
    valid = ~np.isnan(correct)
    if not valid.all():
        logger.warning("pairwise_accuracy: %d pair(s) with NaN scores left out.", (~valid).sum())
    return float(correct[valid].mean()) if valid.any() else math.nan


def mean_over(values: dict[str, float], keys: Sequence[str]) -> float:
    """Unweighted mean of ``values[k]`` over the ``keys`` present and not NaN (NaN if none).

    Example:
        >>> mean_over({"a": 1.0, "b": 0.0, "c": float("nan")}, ["a", "b", "c", "d"])
        0.5
    """
    present = [values[k] for k in keys if k in values and not math.isnan(values[k])]
    return float(np.mean(present)) if present else math.nan
