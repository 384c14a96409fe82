"""GRPO advantages and multi-reward aggregation against the released PaCo-GRPO code, restated.

Sources (github.com/X-GenGroup/PaCo-RL):
- ``PaCo-GRPO/paco_grpo/stat_tracking.py``: ``PerPromptStatTracker._calc_grpo_advantage``
  (the default path: weighted sum, centred per prompt, global or per-prompt std floored at 1e-6);
- ``PaCo-GRPO/config/grpo.py``: ``log_tame_aggregate_fn``, ``weighted_advantage_sum_aggregate_fn``,
  ``geometric_mean_aggregate_fn``, ``harmonic_mean_aggregate_fn``. With an ``aggregate_fn``
  the tracker returns the aggregate itself as the advantage (our
  ``normalization="legacy_uncentred"``).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import gmean, hmean

from paco_grpo.advantages import (
    compute_advantages,
    geometric_mean,
    harmonic_mean,
    log_tamed,
    weighted_advantage_sum,
)

RELEASED_STD_FLOOR = 1e-6


def _group(prompts: np.ndarray, rewards: dict[str, np.ndarray]) -> dict[str, dict]:
    """``_group_prompt_rewards``: {reward: {prompt: values}} over ``np.unique`` prompts."""
    return {
        name: {p: values[prompts == p] for p in np.unique(prompts)}
        for name, values in rewards.items()
    }


def _ungroup(prompts: np.ndarray, per_prompt: dict) -> np.ndarray:
    """``_map_advantages_to_order``."""
    out = np.empty(len(prompts))
    for p, values in per_prompt.items():
        out[prompts == p] = values
    return out


def released_grpo_advantages(prompts, rewards, weights, global_std):
    grouped = _group(prompts, rewards)
    combined = {
        p: np.sum([grouped[n][p] * weights.get(n, 1.0) for n in grouped], axis=0)
        for p in next(iter(grouped.values()))
    }
    if global_std:
        std_all = np.maximum(np.std(np.concatenate(list(combined.values()))), RELEASED_STD_FLOOR)
    advantages = {}
    for p, values in combined.items():
        std = std_all if global_std else np.maximum(np.std(values), RELEASED_STD_FLOOR)
        advantages[p] = (values - values.mean()) / std
    return _ungroup(prompts, advantages)


def released_log_tame(prompts, rewards, weights, threshold):
    grouped = _group(prompts, rewards)
    keys = list(next(iter(grouped.values())))
    h = {}
    for name, per_prompt in grouped.items():
        values = np.concatenate([per_prompt[p] for p in keys])
        h[name] = np.std(values) / (np.mean(values) + 1e-6)
    if isinstance(threshold, float):
        cut = threshold
    else:
        cut = {"mean": np.mean, "median": np.median}[threshold](list(h.values()))
    transformed = {
        name: ({p: np.log(1 + v) for p, v in per_prompt.items()} if h[name] > cut else per_prompt)
        for name, per_prompt in grouped.items()
    }
    aggregated = {
        p: np.sum([transformed[n][p] * weights.get(n, 1.0) for n in transformed], axis=0)
        for p in keys
    }
    return _ungroup(prompts, aggregated), {name: bool(h[name] > cut) for name in h}


def released_weighted_advantage_sum(prompts, rewards, weights, global_std):
    grouped = _group(prompts, rewards)
    keys = list(next(iter(grouped.values())))
    normalized = {}
    for name, per_prompt in grouped.items():
        std_all = np.maximum(np.std(np.concatenate([per_prompt[p] for p in keys])), 1e-6)
        normalized[name] = {
            p: (v - v.mean()) / (std_all if global_std else np.maximum(np.std(v), 1e-6))
            for p, v in per_prompt.items()
        }
    aggregated = {
        p: np.sum([normalized[n][p] * weights.get(n, 1.0) for n in grouped], axis=0) for p in keys
    }
    return _ungroup(prompts, aggregated)


def _batch(seed: int):
    """A GRPO batch: 3-6 prompts x 2-8 samples, two or three positive rewards of different
    spread (one tight like CLIP-T, one wide like a consistency score)."""
    rng = np.random.default_rng(seed)
    n_prompts, group = int(rng.integers(3, 7)), int(rng.integers(2, 9))
    prompts = np.repeat([f"prompt {k}" for k in rng.permutation(n_prompts)], group)
    prompts = prompts[rng.permutation(len(prompts))]
    n = len(prompts)
    rewards = {
        "consistency": rng.uniform(0.05, 0.95, n),
        "clip_t": rng.normal(0.3, 0.01, n),
    }
    if seed % 2:
        rewards["pickscore"] = rng.normal(0.8, 0.05, n)
    weights = {name: float(rng.uniform(0.2, 2.0)) for name in rewards}
    return prompts, rewards, weights


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("global_std", [True, False])
def test_weighted_sum_advantages_equal_released(seed, global_std):
    prompts, rewards, weights = _batch(seed)
    expected = released_grpo_advantages(prompts, rewards, weights, global_std)
    ours = compute_advantages(
        rewards, weights, list(prompts), aggregator="weighted_sum",
        std_scope="global" if global_std else "group", std_floor=RELEASED_STD_FLOOR,
    )  # fmt: skip
    np.testing.assert_allclose(ours.advantages, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("threshold", [0.2, 0.05, "mean", "median"])
def test_log_tamed_aggregate_equals_released(seed, threshold):
    prompts, rewards, weights = _batch(seed)
    expected, expected_tamed = released_log_tame(prompts, rewards, weights, threshold)
    aggregated, tamed = log_tamed(rewards, weights, threshold, return_tamed=True)
    assert tamed == expected_tamed
    np.testing.assert_allclose(aggregated, expected, rtol=1e-12)
    legacy = compute_advantages(
        rewards, weights, list(prompts), aggregator="log_tamed", threshold=threshold,
        normalization="legacy_uncentred",
    )  # fmt: skip
    np.testing.assert_allclose(legacy.advantages, expected, rtol=1e-12)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("global_std", [True, False])
def test_weighted_advantage_sum_equals_released(seed, global_std):
    prompts, rewards, weights = _batch(seed)
    expected = released_weighted_advantage_sum(prompts, rewards, weights, global_std)
    ours = weighted_advantage_sum(
        rewards, weights, list(prompts), "global" if global_std else "group", RELEASED_STD_FLOOR
    )
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_geometric_and_harmonic_means_equal_released(seed):
    """The released aggregators are unweighted (scipy's ``gmean``/``hmean``): equal weights."""
    _, rewards, _ = _batch(seed)
    stack = np.stack(list(rewards.values()))
    equal = dict.fromkeys(rewards, 1.0)
    np.testing.assert_allclose(geometric_mean(rewards, equal), gmean(stack, axis=0), rtol=1e-12)
    np.testing.assert_allclose(harmonic_mean(rewards, equal), hmean(stack, axis=0), rtol=1e-12)
