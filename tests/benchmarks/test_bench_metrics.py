"""Ranking and pairwise metrics against independent scipy computations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from paco_reward.errors import InputError
from paco_reward.metrics import (
    RANKING_METRICS,
    item_ranking_metrics,
    mean_over,
    pairwise_accuracy,
    pairwise_correct,
    predicted_order,
    ranking_metrics,
)

PERMS = list(itertools.permutations(range(4)))


def scores_for(order):
    """Scores whose descending order is ``order`` (best candidate gets the highest score)."""
    scores = np.zeros(len(order))
    for position, candidate in enumerate(order):
        scores[candidate] = len(order) - position
    return scores


def test_all_576_permutation_pairs_match_scipy(scipy_metrics):
    differing = 0
    for human in PERMS:
        for pred in PERMS:
            ours = item_ranking_metrics(scores_for(pred), human)
            expected = scipy_metrics(pred, human)
            for name in RANKING_METRICS:
                assert ours[name] == pytest.approx(expected[name], abs=1e-12), (human, pred, name)
            standard = (ours["kendall_tau"], ours["spearman_rho"])
            released = (ours["kendall_tau_ref"], ours["spearman_rho_ref"])
            differing += not np.allclose(standard, released)
    assert differing == 328


def test_standard_and_released_definitions_on_a_known_item():
    # human: candidate 1 best, then 2, 3, 0. The scorer puts 2 first, then 3, 0, 1.
    # Rank vectors: human (3, 0, 1, 2), predicted (2, 3, 0, 1).
    m = item_ranking_metrics([0.3, 0.1, 0.9, 0.5], [1, 2, 3, 0])
    assert m["accuracy"] == 0.0
    assert m["top1_bottom1"] == 0.0
    assert m["footrule"] == 1 + 3 + 1 + 1
    assert m["kendall_tau"] == pytest.approx(0.0)  # 3 concordant, 3 discordant
    assert m["spearman_rho"] == pytest.approx(1 - 6 * (1 + 9 + 1 + 1) / 60)
    # Orderings (1, 2, 3, 0) vs (2, 3, 0, 1): tau 0, rho 1 - 6 * 12 / 60.
    assert m["kendall_tau_ref"] == pytest.approx(0.0)
    assert m["spearman_rho_ref"] == pytest.approx(1 - 6 * 12 / 60)


def test_ties_are_broken_deterministically():
    assert predicted_order([0.5, 0.9, 0.5, 0.1]) == [1, 0, 2, 3]
    assert predicted_order([0.5, 0.9, 0.5, 0.1], ties="last") == [1, 2, 0, 3]
    # "last" is what the released np.argsort(scores)[::-1] gives.
    scores = np.array([0.2, 0.2, 0.7, 0.2])
    assert predicted_order(scores, ties="last") == np.argsort(scores)[::-1].tolist()
    all_tied = [0.4] * 4
    assert item_ranking_metrics(all_tied, [0, 1, 2, 3])["accuracy"] == 1.0
    assert item_ranking_metrics(all_tied, [0, 1, 2, 3], ties="last")["accuracy"] == 0.0


def test_ranking_metrics_averages_items_and_skips_nan(scipy_metrics, caplog):
    human = [[0, 1, 2, 3], [2, 0, 3, 1], [1, 0, 2]]
    scores = [[0.9, 0.1, 0.5, 0.3], [0.2, 0.4, 0.8, 0.6], [0.1, 0.5, 0.3]]
    preds = [predicted_order(s) for s in scores]
    expected = [scipy_metrics(p, h) for p, h in zip(preds, human)]
    result = ranking_metrics(scores + [[0.1, math.nan]], human + [[0, 1]])
    for name in RANKING_METRICS:
        assert result[name] == pytest.approx(np.mean([e[name] for e in expected]))
    assert result["n_items"] == 3 and result["n_skipped"] == 1
    assert "non-finite" in caplog.text
    empty = ranking_metrics([], [])
    assert empty["n_items"] == 0 and math.isnan(empty["accuracy"])


def test_ranking_metrics_validation():
    with pytest.raises(InputError, match="one human order per item"):
        ranking_metrics([[0.1, 0.2]], [])
    with pytest.raises(InputError, match=r"item 0: .*not an ordering of the 3 candidates"):
        ranking_metrics([[0.1, 0.2, 0.3]], [[0, 1, 1]])
    with pytest.raises(InputError, match="at least 2 candidates"):
        item_ranking_metrics([0.1], [0])
    with pytest.raises(InputError, match="contain NaN"):
        item_ranking_metrics([0.1, math.nan], [0, 1])
    with pytest.raises(InputError, match="not a tie rule"):
        predicted_order([0.1, 0.2], ties="random")


def test_pairwise_accuracy_strict_and_non_strict(caplog):
    preferred = [0.9, 0.5, 0.2, math.nan, 0.7]
    other = [0.1, 0.5, 0.4, 0.3, 0.6]
    assert pairwise_correct(preferred, other)[:3].tolist() == [1.0, 0.0, 0.0]
    assert math.isnan(pairwise_correct(preferred, other)[3])
    assert pairwise_accuracy(preferred, other) == pytest.approx(2 / 4)
    assert pairwise_accuracy(preferred, other, strict=False) == pytest.approx(3 / 4)
    assert "NaN scores left out" in caplog.text
    assert math.isnan(pairwise_accuracy([math.nan], [0.1]))
    with pytest.raises(InputError, match="one score per pair"):
        pairwise_accuracy([0.1, 0.2], [0.3])


def test_mean_over_ignores_missing_and_nan():
    values = {"a": 0.2, "b": 0.6, "c": math.nan}
    assert mean_over(values, ["a", "b", "c", "zzz"]) == pytest.approx(0.4)
    assert math.isnan(mean_over(values, ["c", "zzz"]))
