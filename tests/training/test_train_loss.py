"""first_token_weighted_loss: both modes against hand-computed values, and its normaliser."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from paco_reward.errors import InputError
from paco_reward.training.loss import first_token_weighted_loss, loss_normaliser, token_weights

IGN = -100


def _logits_for(targets_ce: list[list[float]], vocab: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits/labels where supervised token k of sequence i has cross-entropy ce[i][k]:
    one-hot-ish logits built so that CE = -log softmax(target) is known in closed form."""
    rows = len(targets_ce)
    length = max(len(r) for r in targets_ce) + 2
    logits = torch.zeros(rows, length, vocab)
    labels = torch.full((rows, length), IGN)
    for i, ces in enumerate(targets_ce):
        for k, ce in enumerate(ces):
            # logits[pos] predict labels[pos + 1]; supervised tokens start at position 2.
            p = math.exp(-ce)  # desired probability of the target (token 1)
            other = (1 - p) / (vocab - 1)
            logits[i, 1 + k] = torch.log(torch.tensor([other, p, other, other]))
            labels[i, 2 + k] = 1
    return logits, labels


def test_paper_mode_matches_hand_computed_value():
    ces = [[2.0, 1.0, 3.0], [0.5]]
    logits, labels = _logits_for(ces)
    alpha = 0.3
    seq0 = alpha * 2.0 + (1 - alpha) / 2 * (1.0 + 3.0)
    seq1 = 0.5  # n = 1: the decision token alone
    expected = (seq0 + seq1) / 2
    got = first_token_weighted_loss(logits, labels, alpha=alpha, mode="paper")
    assert got.item() == pytest.approx(expected, abs=1e-5)


def test_reference_mode_matches_hand_computed_value():
    ces = [[2.0, 1.0, 3.0], [0.5, 1.5]]
    logits, labels = _logits_for(ces)
    alpha = 0.3
    # decision token: α; others: n(1-α)/(n-1); weighted sum over all 5 tokens / 5.
    seq0 = alpha * 2.0 + 3 * (1 - alpha) / 2 * (1.0 + 3.0)
    seq1 = alpha * 0.5 + 2 * (1 - alpha) / 1 * 1.5
    expected = (seq0 + seq1) / 5
    got = first_token_weighted_loss(logits, labels, alpha=alpha, mode="reference")
    assert got.item() == pytest.approx(expected, abs=1e-5)


def test_alpha_one_over_n_is_plain_mle():
    torch.manual_seed(0)
    logits = torch.randn(1, 6, 11)
    labels = torch.tensor([[IGN, IGN, 3, 5, 7, 2]])
    plain = F.cross_entropy(logits[0, 1:-1], labels[0, 2:])
    got = first_token_weighted_loss(logits, labels, alpha=1 / 4, mode="paper")
    assert got.item() == pytest.approx(plain.item(), abs=1e-6)
    uniform = first_token_weighted_loss(logits, labels, alpha=None, mode="paper")
    assert uniform.item() == pytest.approx(plain.item(), abs=1e-6)


def test_alpha_shifts_weight_onto_the_decision_token():
    weights = token_weights(torch.tensor([[IGN, 4, 5, 6, 7, IGN]]), alpha=0.9, mode="paper")
    assert weights[0].tolist() == pytest.approx([0, 0.9, 0.1 / 3, 0.1 / 3, 0.1 / 3, 0])


def test_num_items_sets_the_normaliser_of_an_accumulated_batch():
    torch.manual_seed(1)
    logits = torch.randn(4, 7, 9)
    labels = torch.randint(0, 9, (4, 7))
    labels[:, :3] = IGN
    labels[3, 5:] = IGN
    for mode in ("paper", "reference"):
        whole = first_token_weighted_loss(logits, labels, 0.2, mode)
        total = loss_normaliser(labels, mode)
        halves = sum(
            first_token_weighted_loss(logits[s], labels[s], 0.2, mode, num_items=total)
            for s in (slice(0, 2), slice(2, 4))
        )
        assert halves.item() == pytest.approx(whole.item(), abs=1e-6)


def test_normaliser_counts_sequences_or_tokens():
    labels = torch.tensor([[IGN, IGN, 1, 2], [IGN, IGN, IGN, IGN], [IGN, 3, 4, 5]])
    assert loss_normaliser(labels, "paper") == 2
    assert loss_normaliser(labels, "reference") == 5


def test_batch_without_supervised_tokens_gives_zero_loss_with_gradient():
    logits = torch.randn(2, 4, 5, requires_grad=True)
    loss = first_token_weighted_loss(logits, torch.full((2, 4), IGN), 0.1)
    assert loss.item() == 0.0
    loss.backward()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 1.5}, r"alpha \(first_token_weight\) must be in \[0, 1\]; got 1.5"),
        ({"alpha": 0.1, "mode": "token"}, r"loss mode 'token' is not one of"),
    ],
)
def test_invalid_arguments_raise(kwargs, match):
    with pytest.raises(InputError, match=match):
        first_token_weighted_loss(
            torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), **kwargs
        )


def test_shape_mismatch_raises():
    with pytest.raises(InputError, match=r"disagree on \[batch, length\]"):
        first_token_weighted_loss(torch.zeros(1, 3, 4), torch.zeros(1, 4, dtype=torch.long))
