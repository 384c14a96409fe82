"""Fixtures of the benchmark tests: a tiny offline CLIP and an independent metric oracle."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory):
    from paco_reward.testing.clip import build_tiny_clip

    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip") / "clip", seed=0)


def scipy_item_metrics(pred_order, human_order) -> dict:
    """Every ranking metric of one item computed independently with scipy on rank vectors
    (standard) and on the orderings themselves (the released evaluator's *_ref)."""
    pred, human = np.asarray(pred_order), np.asarray(human_order)
    r_p, r_h = np.argsort(pred), np.argsort(human)  # position of each candidate
    return {
        "accuracy": float(np.mean(pred == human)),
        "kendall_tau": float(kendalltau(r_h, r_p).statistic),
        "spearman_rho": float(spearmanr(r_h, r_p).statistic),
        "top1_bottom1": (float(pred[0] == human[0]) + float(pred[-1] == human[-1])) / 2,
        "footrule": float(np.abs(r_h - r_p).sum()),
        "kendall_tau_ref": float(kendalltau(human, pred).statistic),
        "spearman_rho_ref": float(spearmanr(human, pred).statistic),
    }


@pytest.fixture
def scipy_metrics():
    return scipy_item_metrics
