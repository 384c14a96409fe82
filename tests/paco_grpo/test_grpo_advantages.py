"""Reward aggregation, log taming and group-relative advantages."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from paco_grpo.advantages import (
    compute_advantages,
    geometric_mean,
    group_normalize,
    harmonic_mean,
    heterogeneity,
    log_tamed,
    weighted_advantage_sum,
    weighted_sum,
)
from paco_reward.errors import InputError


def test_aggregators_closed_forms():
    r = {"a": np.array([1.0, 4.0]), "b": np.array([4.0, 1.0])}
    w = {"a": 1.0, "b": 3.0}
    np.testing.assert_allclose(weighted_sum(r, w), [13.0, 7.0])
    np.testing.assert_allclose(geometric_mean(r, w), [4.0**0.75, 4.0**0.25])
    np.testing.assert_allclose(harmonic_mean(r, w), [4 / (1 + 3 / 4), 4 / (1 / 4 + 3)])
    # missing weight means 1, zero weight ignores the reward even if it is NaN
    np.testing.assert_allclose(weighted_sum({"a": [1.0], "b": [np.nan]}, {"b": 0.0}), [1.0])


def test_log_taming_applies_only_to_heterogeneous_rewards():
    rng = np.random.default_rng(0)
    wide = rng.uniform(0.0, 1.0, 64)  # std/mean ~ 0.58 > 0.2
    narrow = 0.3 + rng.uniform(-0.01, 0.01, 64)  # ~0.02
    assert heterogeneity(wide) > 0.2 > heterogeneity(narrow)
    out, tamed = log_tamed({"c": wide, "t": narrow}, {"c": 1.0, "t": 2.0}, return_tamed=True)
    assert tamed == {"c": True, "t": False}
    np.testing.assert_allclose(out, np.log1p(wide) + 2 * narrow)
    # a huge threshold tames nothing: plain weighted sum
    np.testing.assert_allclose(
        log_tamed({"c": wide, "t": narrow}, {"c": 1.0, "t": 2.0}, threshold=10.0),
        wide + 2 * narrow,
    )


@pytest.mark.parametrize(
    "threshold,expected",
    [("mean", [True, False, False, False]), ("median", [True, True, False, False])],
)
def test_log_taming_dynamic_thresholds(threshold, expected):
    rewards = {
        "x": np.array([0.01, 0.01, 0.01, 10.0]),  # h ~ 1.7
        "w": np.array([0.4, 0.6, 1.0, 0.9]),  # h ~ 0.32
        "y": np.array([0.5, 0.7, 0.9, 0.6]),  # h ~ 0.22
        "z": np.array([1.0, 1.01, 0.99, 1.0]),  # h ~ 0.007
    }
    h = {k: heterogeneity(v) for k, v in rewards.items()}
    assert np.mean(list(h.values())) > h["w"] > np.median(list(h.values())) > h["y"]
    _, tamed = log_tamed(rewards, {}, threshold=threshold, return_tamed=True)
    assert list(tamed.values()) == expected


def test_log_taming_edge_cases():
    with pytest.raises(InputError, match="rewards > -1"):
        log_tamed({"a": np.array([0.5, -1.0])}, {"a": 1.0})
    with pytest.raises(InputError, match="must be a number, 'mean' or 'median'"):
        log_tamed({"a": np.array([0.5, 1.0])}, {"a": 1.0}, threshold="max")
    # zero mean: infinite heterogeneity, tamed; NaN stays NaN
    out, tamed = log_tamed({"a": np.array([-0.5, 0.5, np.nan])}, {}, return_tamed=True)
    assert tamed == {"a": True}
    np.testing.assert_allclose(out[:2], np.log1p([-0.5, 0.5]))
    assert np.isnan(out[2])
    # constant reward: h = 0, never tamed
    assert log_tamed({"a": np.array([0.4, 0.4])}, {}, return_tamed=True)[1] == {"a": False}


def test_group_normalize_centres_per_group_and_scales():
    scores = np.array([1.0, 3.0, 10.0, 14.0])
    adv, stats = group_normalize(scores, ["p0", "p0", "p1", "p1"], std_scope="group")
    np.testing.assert_allclose(adv, [-1, 1, -1, 1])
    adv_g, _ = group_normalize(scores, ["p0", "p0", "p1", "p1"], std_scope="global")
    np.testing.assert_allclose(adv_g, np.array([-1, 1, -2, 2]) / scores.std())
    assert stats["group_std_mean"] == pytest.approx(1.5) and stats["zero_std_fraction"] == 0.0


def test_grouping_is_by_id_not_text():
    # same prompt text under two ids -> two groups
    adv, _ = group_normalize([0.0, 1.0, 5.0, 6.0], [0, 0, 1, 1], std_scope="group")
    np.testing.assert_allclose(adv, [-1, 1, -1, 1])


def test_zero_std_group_is_floored_not_divided_by_zero():
    adv, stats = group_normalize([0.5, 0.5, 0.5], [0, 0, 0], std_scope="group", std_floor=1e-3)
    assert np.all(adv == 0.0) and stats["zero_std_fraction"] == 1.0


def test_nan_rewards_get_zero_advantage_and_leave_group_stats(caplog):
    rewards = {"a": np.array([1.0, 3.0, np.nan, 2.0])}
    with caplog.at_level(logging.WARNING, logger="paco_grpo.advantages"):
        out = compute_advantages(rewards, {}, [0, 0, 0, 1], "weighted_sum", std_scope="group")
    assert out.num_failed == 1 and "1 of 4 samples" in caplog.text
    np.testing.assert_allclose(out.advantages, [-1.0, 1.0, 0.0, 0.0])


def test_weighted_advantage_sum_normalises_each_reward_first():
    rewards = {"a": np.array([0.0, 1.0, 0.0, 1.0]), "b": np.array([100.0, 300.0, 300.0, 100.0])}
    adv = weighted_advantage_sum(rewards, {"a": 1.0, "b": 1.0}, [0, 0, 1, 1], std_scope="group")
    # each reward contributes +-1 whatever its scale, so b cannot drown a
    np.testing.assert_allclose(adv, [-2.0, 2.0, 0.0, 0.0])
    out = compute_advantages(
        rewards, {"a": 2.0, "b": 1.0}, [0, 0, 1, 1], "weighted_advantage_sum", std_scope="group"
    )
    np.testing.assert_allclose(out.advantages, [-3.0, 3.0, -1.0, 1.0])


def test_compute_advantages_log_tamed_end_to_end():
    rewards = {
        "consistency": np.array([0.1, 0.9, 0.4, 0.6]),
        "clip_t": np.array([0.3, 0.3, 0.32, 0.28]),
    }
    out = compute_advantages(rewards, {"consistency": 1.0, "clip_t": 1.0}, [0, 0, 1, 1])
    agg = np.log1p(rewards["consistency"]) + rewards["clip_t"]
    centred = agg - np.repeat([agg[:2].mean(), agg[2:].mean()], 2)
    np.testing.assert_allclose(out.advantages, centred / agg.std())
    assert out.tamed == {"consistency": True, "clip_t": False}
    for k in (0, 2):  # each group sums to zero
        assert out.advantages[k] + out.advantages[k + 1] == pytest.approx(0.0)


def test_legacy_uncentred_uses_aggregated_reward():
    out = compute_advantages(
        {"a": [0.2, 0.4]}, {}, [0, 0], "weighted_sum", normalization="legacy_uncentred"
    )
    np.testing.assert_allclose(out.advantages, [0.2, 0.4])


def test_validation_errors():
    with pytest.raises(InputError, match="Unknown aggregator 'sum'"):
        compute_advantages({"a": [1.0]}, {}, [0], "sum")
    with pytest.raises(InputError, match="normalization must be one of"):
        compute_advantages({"a": [1.0]}, {}, [0], normalization="raw")
    with pytest.raises(InputError, match="std_scope must be one of"):
        group_normalize([1.0], [0], std_scope="batch")
    with pytest.raises(InputError, match="std_floor must be > 0"):
        group_normalize([1.0], [0], std_floor=0.0)
    with pytest.raises(InputError, match="2 group ids for 1 scores"):
        group_normalize([1.0], [0, 1])
    with pytest.raises(InputError, match="weights name rewards that were not computed"):
        weighted_sum({"a": [1.0]}, {"b": 1.0})
    with pytest.raises(InputError, match="rewards is empty"):
        weighted_sum({}, {})
    with pytest.raises(InputError, match="weights must be >= 0"):
        weighted_sum({"a": [1.0]}, {"a": -1.0})
    with pytest.raises(InputError, match="geometric_mean needs rewards >= 0"):
        geometric_mean({"a": [-0.1]}, {})
    with pytest.raises(InputError, match="harmonic_mean needs rewards > 0"):
        harmonic_mean({"a": [0.0]}, {})
