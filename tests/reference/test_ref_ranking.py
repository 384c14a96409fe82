"""ConsistencyRank metrics against the released evaluator, restated with scipy.

Source: ``PaCo-Reward/evaluation/Consistency_Rank/eval.py``: ``process_item`` (the predicted
order ``np.argsort(scores)[::-1]``), ``compute_ranking_metrics`` and ``footrule_distance``
(github.com/X-GenGroup/PaCo-RL).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr

from paco_reward.metrics import item_ranking_metrics, predicted_order, ranking_metrics


def released_item_metrics(scores: list[float], gt_rank: list[int]) -> dict[str, float]:
    """``compute_ranking_metrics(pred_rank, gt_rank)`` with ``pred_rank`` from
    ``np.argsort(scores)[::-1]``; scores here are tie-free, so the sort is unambiguous."""
    pred_rank = np.argsort(scores)[::-1].tolist()
    correct = sum(p == g for p, g in zip(pred_rank, gt_rank))
    ref_pos = {v: i for i, v in enumerate(gt_rank)}
    pred_pos = {v: i for i, v in enumerate(pred_rank)}
    top1 = int(pred_rank[0] == gt_rank[0])
    bottom1 = int(pred_rank[-1] == gt_rank[-1])
    return {
        "accuracy": correct / len(gt_rank),
        "kendalltau": kendalltau(pred_rank, gt_rank)[0],
        "spearmanr": spearmanr(pred_rank, gt_rank)[0],
        "footrule_distance": sum(abs(ref_pos[i] - pred_pos[i]) for i in gt_rank),
        "top1_bottom1_accuracy": (top1 + bottom1) / 2,
    }


OURS_FOR_RELEASED = {
    "accuracy": "accuracy",
    "kendalltau": "kendall_tau_ref",
    "spearmanr": "spearman_rho_ref",
    "footrule_distance": "footrule",
    "top1_bottom1_accuracy": "top1_bottom1",
}


@pytest.mark.parametrize("seed", range(5))
def test_every_released_metric_equals_ours_on_random_items(seed):
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(60):
        n = int(rng.integers(3, 9))  # scipy's spearmanr needs >= 3 for a defined value
        items.append((rng.permutation(1000)[:n] / 1000.0, rng.permutation(n).tolist()))
    released = [released_item_metrics(s.tolist(), h) for s, h in items]
    for (scores, human), expected in zip(items, released):
        ours = item_ranking_metrics(scores, human)
        for name, our_name in OURS_FOR_RELEASED.items():
            assert ours[our_name] == pytest.approx(expected[name], abs=1e-12), (name, scores, human)
    averaged = ranking_metrics([s for s, _ in items], [h for _, h in items])
    for name, our_name in OURS_FOR_RELEASED.items():
        assert averaged[our_name] == pytest.approx(np.mean([r[name] for r in released]), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_ties_last_is_a_stable_ascending_sort_reversed(seed):
    """``ties="last"`` is what ``np.argsort(scores)[::-1]`` gives when argsort is stable:
    numpy 1.x sorts n <= 16 items by insertion sort, which is. Restated with Python's
    ``sorted`` (stable by definition)."""
    rng = np.random.default_rng(seed)
    for n in range(2, 17):
        scores = rng.integers(0, 3, n) / 2.0  # many ties
        stable_reversed = sorted(range(n), key=lambda i: scores[i])[::-1]
        assert predicted_order(scores, ties="last") == stable_reversed
        assert predicted_order(scores, ties="first") == sorted(range(n), key=lambda i: -scores[i])


def test_tied_items_are_counted():
    metrics = ranking_metrics([[0.5, 0.5, 0.1], [0.9, 0.2, 0.1], [0.3, 0.3, 0.3]], [[0, 1, 2]] * 3)
    assert metrics["n_tied"] == 2
    assert metrics["n_items"] == 3
