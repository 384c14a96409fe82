"""Multi-reward aggregation and group-relative advantages (GRPO).

Rewards arrive as ``{name: array (n,)}`` with NaN for a failed score, plus one prompt
id per sample (samples of the same prompt form a group; grouping is by id, never by
decoded text). The pipeline is:

1. aggregate the rewards into one score per sample (:data:`AGGREGATORS`);
2. centre each group on its mean and divide by the global or per-group std, floored
   (``weighted_advantage_sum`` normalises each reward that way first, then sums);
3. a sample with any NaN reward gets advantage 0 and is left out of its group's
   statistics; how many is reported in :class:`AdvantageResult.num_failed`.

Log taming (PaCo-RL, sec. 4.2): for each reward k the heterogeneity ``h_k = std/mean``
over the batch; a reward with ``h_k > delta`` is replaced by ``log(1 + r)`` before the
weighted sum, so a high-variance reward cannot drown the others. ``delta`` is a number
(0.2 in the paper) or ``"mean"`` / ``"median"`` of the ``h_k``.

    >>> import numpy as np
    >>> rewards = {"consistency": np.array([0.2, 0.9, 0.5, 0.6]), "clip_t": np.array([0.3, 0.3, 0.31, 0.29])}
    >>> out = compute_advantages(rewards, {"consistency": 1.0, "clip_t": 1.0}, [0, 0, 1, 1])
    >>> out.tamed
    {'consistency': True, 'clip_t': False}
    >>> np.round(out.advantages, 3)
    array([-1.403,  1.403, -0.136,  0.136])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from paco_reward.errors import InputError

logger = logging.getLogger(__name__)

__all__ = [
    "AGGREGATORS",
    "AdvantageResult",
    "compute_advantages",
    "geometric_mean",
    "group_normalize",
    "harmonic_mean",
    "heterogeneity",
    "log_tamed",
    "weighted_advantage_sum",
    "weighted_sum",
]

STD_SCOPES = ("global", "group")
NORMALIZATIONS = ("group", "legacy_uncentred")


def _stack(rewards: Mapping[str, Sequence[float]], weights: Mapping[str, float]):
    if not rewards:
        raise InputError("rewards is empty; pass at least one {name: scores} entry.")
    unknown = set(weights) - set(rewards)
    if unknown:
        raise InputError(
            f"weights name rewards that were not computed: {sorted(unknown)}; "
            f"computed rewards are {sorted(rewards)}."
        )
    names = list(rewards)
    matrix = np.stack([np.asarray(rewards[n], dtype=np.float64) for n in names], axis=1)
    w = np.array([float(weights.get(n, 1.0)) for n in names])
    if (w < 0).any():
        raise InputError(f"reward weights must be >= 0; got {dict(zip(names, w))}.")
    return names, matrix, w


def _weighted_nan_rows(matrix: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Rows with a NaN in a reward of non-zero weight."""
    return np.isnan(matrix[:, w > 0]).any(axis=1)


def weighted_sum(
    rewards: Mapping[str, Sequence[float]], weights: Mapping[str, float]
) -> np.ndarray:
    """``sum_k w_k r_k`` per sample (NaN where a weighted reward is NaN).

    Example:
        >>> weighted_sum({"a": [1.0, 2.0], "b": [0.5, 0.5]}, {"a": 1.0, "b": 2.0})
        array([2., 3.])
    """
    names, matrix, w = _stack(rewards, weights)
    out = np.where(w > 0, matrix, 0.0) @ w
    out[_weighted_nan_rows(matrix, w)] = np.nan
    return out


def geometric_mean(
    rewards: Mapping[str, Sequence[float]], weights: Mapping[str, float]
) -> np.ndarray:
    """Weighted geometric mean ``prod_k r_k^(w_k / sum w)``; rewards must be >= 0.

    Example:
        >>> geometric_mean({"a": [4.0], "b": [1.0]}, {"a": 1.0, "b": 1.0})
        array([2.])
    """
    names, matrix, w = _stack(rewards, weights)
    if (matrix[~np.isnan(matrix)] < 0).any():
        raise InputError("geometric_mean needs rewards >= 0; use weighted_sum or log_tamed.")
    with np.errstate(divide="ignore"):
        out = np.exp(np.where(w > 0, np.log(matrix), 0.0) @ (w / w.sum()))
    out[_weighted_nan_rows(matrix, w)] = np.nan
    return out


def harmonic_mean(
    rewards: Mapping[str, Sequence[float]], weights: Mapping[str, float]
) -> np.ndarray:
    """Weighted harmonic mean ``sum w / sum_k (w_k / r_k)``; rewards must be > 0.

    Example:
        >>> harmonic_mean({"a": [1.0], "b": [0.5]}, {"a": 1.0, "b": 1.0})
        array([0.66666667])
    """
    names, matrix, w = _stack(rewards, weights)
    if (matrix[~np.isnan(matrix)] <= 0).any():
        raise InputError("harmonic_mean needs rewards > 0; use weighted_sum or log_tamed.")
    out = w.sum() / (np.where(w > 0, 1.0 / matrix, 0.0) @ w)
    out[_weighted_nan_rows(matrix, w)] = np.nan
    return out


def heterogeneity(values: Sequence[float]) -> float:
    """``std / |mean|`` of the finite values (inf when the mean is 0, NaN when none is finite)."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return float("nan")
    mean = float(finite.mean())
    if mean == 0.0:
        return float("inf")
    return float(finite.std() / abs(mean))


def _resolve_threshold(threshold: float | str, h: np.ndarray) -> float:
    if isinstance(threshold, str):
        finite = h[np.isfinite(h)]
        if threshold == "mean":
            return float(finite.mean()) if finite.size else float("inf")
        if threshold == "median":
            return float(np.median(finite)) if finite.size else float("inf")
        raise InputError(
            f"log-taming threshold must be a number, 'mean' or 'median'; got {threshold!r}."
        )
    return float(threshold)


def log_tamed(
    rewards: Mapping[str, Sequence[float]],
    weights: Mapping[str, float],
    threshold: float | str = 0.2,
    *,
    return_tamed: bool = False,
):
    """Log-tamed weighted sum: ``r_k -> log(1 + r_k)`` for each reward with ``std/mean > threshold``.

    Args:
        rewards / weights: ``{name: scores}`` and ``{name: weight}`` (missing weight = 1).
        threshold: ``delta`` (0.2 in the paper), or ``"mean"`` / ``"median"`` of the rewards'
            heterogeneities.
        return_tamed: also return ``{name: was_tamed}``.

    Raises:
        ValueError: a finite reward is <= -1 (``log(1 + r)`` is undefined).

    Example:
        >>> log_tamed({"a": [0.0, 1.0], "b": [1.0, 1.0]}, {"a": 1.0, "b": 1.0})
        array([1.        , 1.69314718])
    """
    names, matrix, w = _stack(rewards, weights)
    finite = matrix[np.isfinite(matrix)]
    if (finite <= -1).any():
        bad = {
            n: float(np.nanmin(matrix[:, k]))
            for k, n in enumerate(names)
            if np.nanmin(matrix[:, k]) <= -1
        }
        raise InputError(
            f"log taming needs rewards > -1 (log(1 + r)); got minima {bad}. Rescale the reward "
            "or use aggregator='weighted_sum'."
        )
    h = np.array([heterogeneity(matrix[:, k]) for k in range(len(names))])
    delta = _resolve_threshold(threshold, h)
    tamed = {n: bool(h[k] > delta) for k, n in enumerate(names)}
    transformed = {
        n: (np.log1p(matrix[:, k]) if tamed[n] else matrix[:, k]) for k, n in enumerate(names)
    }
    out = weighted_sum(transformed, dict(zip(names, w)))
    return (out, tamed) if return_tamed else out


def group_normalize(
    scores: Sequence[float],
    group_ids: Sequence[Hashable],
    std_scope: str = "global",
    std_floor: float = 1e-4,
) -> tuple[np.ndarray, dict[str, float]]:
    """Centre each group on its mean and divide by the global or per-group std (floored).

    NaN scores get advantage 0 and are excluded from every statistic.

    Returns:
        ``(advantages, stats)`` with ``stats`` holding ``group_std_mean`` (mean per-group std)
        and ``zero_std_fraction`` (groups whose std is below ``std_floor``).

    Example:
        >>> adv, stats = group_normalize([1.0, 3.0, 5.0, 5.0], ["a", "a", "b", "b"], std_scope="group")
        >>> adv.tolist(), stats["zero_std_fraction"]
        ([-1.0, 1.0, 0.0, 0.0], 0.5)
    """
    if std_scope not in STD_SCOPES:
        raise InputError(f"std_scope must be one of {STD_SCOPES}; got {std_scope!r}.")
    if std_floor <= 0:
        raise InputError(f"std_floor must be > 0; got {std_floor}.")
    scores = np.asarray(scores, dtype=np.float64)
    if len(group_ids) != len(scores):
        raise InputError(
            f"{len(group_ids)} group ids for {len(scores)} scores; pass one id per sample."
        )
    valid = np.isfinite(scores)
    advantages = np.zeros_like(scores)
    centred = np.zeros_like(scores)
    group_stds = []
    per_sample_std = np.ones_like(scores)
    keys = list(dict.fromkeys(group_ids))
    for key in keys:
        members = np.array([g == key for g in group_ids]) & valid
        if not members.any():
            continue
        values = scores[members]
        centred[members] = values - values.mean()
        std = float(values.std())
        group_stds.append(std)
        per_sample_std[members] = max(std, std_floor)
    if std_scope == "global":
        global_std = float(scores[valid].std()) if valid.any() else 0.0
        per_sample_std[:] = max(global_std, std_floor)
    advantages[valid] = centred[valid] / per_sample_std[valid]
    stats = {
        "group_std_mean": float(np.mean(group_stds)) if group_stds else float("nan"),
        "zero_std_fraction": float(np.mean([s < std_floor for s in group_stds]))
        if group_stds
        else float("nan"),
    }
    return advantages, stats


def weighted_advantage_sum(
    rewards: Mapping[str, Sequence[float]],
    weights: Mapping[str, float],
    group_ids: Sequence[Hashable],
    std_scope: str = "global",
    std_floor: float = 1e-4,
) -> np.ndarray:
    """Group-normalise each reward on its own, then take the weighted sum of the advantages.

    Example:
        >>> weighted_advantage_sum({"a": [0.0, 1.0], "b": [10.0, 30.0]}, {"a": 1.0, "b": 1.0}, [0, 0])
        array([-2.,  2.])
    """
    names, matrix, w = _stack(rewards, weights)
    total = np.zeros(len(matrix))
    for k, _ in enumerate(names):
        if w[k] == 0:
            continue
        adv, _ = group_normalize(matrix[:, k], group_ids, std_scope, std_floor)
        total += w[k] * adv
    total[_weighted_nan_rows(matrix, w)] = 0.0
    return total


AGGREGATORS: dict[str, Callable] = {
    "weighted_sum": weighted_sum,
    "geometric_mean": geometric_mean,
    "harmonic_mean": harmonic_mean,
    "log_tamed": log_tamed,
    "weighted_advantage_sum": weighted_advantage_sum,
}


@dataclass
class AdvantageResult:
    """Advantages and what produced them (for logging)."""

    advantages: np.ndarray
    aggregated: np.ndarray
    num_failed: int
    group_std_mean: float
    zero_std_fraction: float
    tamed: dict[str, bool] = field(default_factory=dict)


def compute_advantages(
    rewards: Mapping[str, Sequence[float]],
    weights: Mapping[str, float],
    group_ids: Sequence[Hashable],
    aggregator: str = "log_tamed",
    threshold: float | str = 0.2,
    std_scope: str = "global",
    std_floor: float = 1e-4,
    normalization: str = "group",
) -> AdvantageResult:
    """Aggregate rewards and turn them into group-relative advantages.

    Args:
        rewards: ``{name: (n,) scores}``, NaN for a failed score.
        weights: ``{name: weight}``; a missing name has weight 1.
        group_ids: one prompt id per sample.
        aggregator: one of :data:`AGGREGATORS`.
        threshold: log-taming ``delta`` (number, ``"mean"`` or ``"median"``).
        std_scope: ``"global"`` (one std over the batch, Flow-GRPO's default) or ``"group"``.
        std_floor: lower bound of the std divisor.
        normalization: ``"group"`` (centre + scale) or ``"legacy_uncentred"`` (the released
            code's behaviour: the aggregated reward itself is the advantage).
    """
    if aggregator not in AGGREGATORS:
        raise InputError(f"Unknown aggregator {aggregator!r}; choose one of {sorted(AGGREGATORS)}.")
    if normalization not in NORMALIZATIONS:
        raise InputError(f"normalization must be one of {NORMALIZATIONS}; got {normalization!r}.")
    names, matrix, w = _stack(rewards, weights)
    failed = _weighted_nan_rows(matrix, w)
    num_failed = int(failed.sum())
    if num_failed:
        logger.warning(
            "%d of %d samples have a failed (NaN) reward; they get advantage 0 and are left out "
            "of their group's statistics.",
            num_failed,
            len(failed),
        )
    tamed: dict[str, bool] = {}
    if aggregator == "weighted_advantage_sum":
        advantages = weighted_advantage_sum(rewards, weights, group_ids, std_scope, std_floor)
        aggregated = weighted_sum(rewards, weights)
        _, stats = group_normalize(aggregated, group_ids, std_scope, std_floor)
    else:
        if aggregator == "log_tamed":
            aggregated, tamed = log_tamed(rewards, weights, threshold, return_tamed=True)
        else:
            aggregated = AGGREGATORS[aggregator](rewards, weights)
        advantages, stats = group_normalize(aggregated, group_ids, std_scope, std_floor)
        if normalization == "legacy_uncentred":
            advantages = np.where(np.isfinite(aggregated), aggregated, 0.0)
    return AdvantageResult(
        advantages=advantages,
        aggregated=aggregated,
        num_failed=num_failed,
        group_std_mean=stats["group_std_mean"],
        zero_std_fraction=stats["zero_std_fraction"],
        tamed=tamed,
    )
