"""Evaluation metrics of the pairwise evaluator, computed from the decision token.

For every held-out pair the trainer runs one teacher-forced forward pass and reads the
logits at the decision position (the first answer token):

* ``decision_accuracy``: argmax token == the target "Yes"/"No" token (teacher-forced);
* ``score_accuracy``: (score > 0.5) == label, where score = P(Yes)/(P(Yes)+P(No)) from
  :func:`paco_reward.yes_no.yes_probability` (what the scorer returns);
* ``p_yes_on_yes`` / ``p_yes_on_no``: mean score on consistent / inconsistent pairs;
* ``roc_auc``: ROC-AUC of the score against the label (NaN if one class is absent).

    >>> import numpy as np
    >>> roc_auc(np.array([0.9, 0.2, 0.6, 0.4]), np.array([1, 0, 1, 0]))
    1.0
"""

from __future__ import annotations

import math

import numpy as np

from paco_reward.metrics import roc_auc


def decision_metrics(
    p_yes: np.ndarray, labels: np.ndarray, decision_correct: np.ndarray | None = None
) -> dict[str, float]:
    """The evaluation metrics (see the module docstring) from per-pair scores and labels.

    Args:
        p_yes: score of each pair, P(Yes) / (P(Yes) + P(No)).
        labels: 1 = consistent ("Yes"), 0 = inconsistent ("No").
        decision_correct: whether the argmax decision token was the target (teacher-forced);
            defaults to ``score_accuracy``'s per-pair correctness.
    """
    p_yes = np.asarray(p_yes, dtype=np.float64)
    labels = np.asarray(labels).astype(int)
    score_correct = (p_yes > 0.5) == (labels == 1)
    if decision_correct is None:
        decision_correct = score_correct
    yes, no = p_yes[labels == 1], p_yes[labels == 0]
    return {
        "decision_accuracy": float(np.mean(decision_correct)) if len(p_yes) else math.nan,
        "score_accuracy": float(np.mean(score_correct)) if len(p_yes) else math.nan,
        "p_yes_on_yes": float(yes.mean()) if len(yes) else math.nan,
        "p_yes_on_no": float(no.mean()) if len(no) else math.nan,
        "roc_auc": roc_auc(p_yes, labels),
    }


def compute_decision_metrics(eval_prediction) -> dict[str, float]:
    """``compute_metrics`` for ``transformers.Trainer``: ``predictions`` are the
    ``[N, 3]`` rows (score, decision correct, label) that the trainer's
    ``prediction_step`` returns."""
    predictions = np.asarray(eval_prediction.predictions)
    return decision_metrics(predictions[:, 0], predictions[:, 2], predictions[:, 1] > 0.5)
