"""The SFT loss against an independent transcription of the released PaCo-Reward trainer.

Source: ``PaCo-Reward/LLaMA-Factory/src/llamafactory/train/sft/trainer.py``,
``CustomSeq2SeqTrainer.compute_loss`` (github.com/X-GenGroup/PaCo-RL).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from paco_reward.training.loss import first_token_weighted_loss

IGN = -100


def released_compute_loss(logits: torch.Tensor, labels: torch.Tensor, alpha: float) -> torch.Tensor:
    """``CustomSeq2SeqTrainer.compute_loss`` (first_token_weight = alpha), restated in float32
    step by step as the released code computes it."""
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    loss = F.cross_entropy(
        shift_logits.view(-1, shift_logits.shape[-1]), shift_labels.view(-1), reduction="none"
    ).view(shift_labels.shape)
    mask = (shift_labels != IGN).float()
    first_token_mask = (mask.cumsum(dim=1) == 1) & (mask == 1)
    n_tokens = mask.sum(dim=1, keepdim=True)
    n_minus_one = torch.clamp(n_tokens - 1, min=1e-8)
    w_other = n_tokens * (1.0 - alpha) / n_minus_one
    weights = torch.ones_like(mask) * w_other
    weights = weights + first_token_mask.float() * (alpha - w_other)
    return (loss * weights * mask).sum() / mask.sum()


def _random_batch(seed: int, batch: int, length: int, vocab: int, min_supervised: int):
    """Random logits and labels; each row supervises a random contiguous answer span of at
    least ``min_supervised`` tokens (or none, for some rows), after a masked prompt."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=g) * 3
    labels = torch.full((batch, length), IGN)
    for i in range(batch):
        if i > 0 and torch.rand(1, generator=g).item() < 0.2:
            continue  # a row with no supervised token (all prompt / padding)
        n = int(torch.randint(min_supervised, length - 1, (1,), generator=g))
        start = int(torch.randint(1, length - n + 1, (1,), generator=g))
        labels[i, start : start + n] = torch.randint(0, vocab, (n,), generator=g)
        # a few masked tokens inside the answer, as image/pad tokens would be
        holes = torch.rand(n, generator=g) < 0.1
        holes[0] = False
        labels[i, start : start + n][holes] = IGN
    return logits, labels


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("batch", "length", "vocab"), [(1, 9, 7), (4, 16, 11), (8, 40, 50)])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.5, 0.9])
def test_reference_mode_equals_the_released_loss(seed, batch, length, vocab, alpha):
    logits, labels = _random_batch(seed, batch, length, vocab, min_supervised=2)
    if (labels[:, 1:] != IGN).sum(1).eq(1).any():
        pytest.fail("the generator must not make single-token rows here (see the edge-case test)")
    expected = released_compute_loss(logits, labels, alpha)
    got = first_token_weighted_loss(logits, labels, alpha=alpha, mode="reference")
    assert got.item() == pytest.approx(expected.item(), rel=1e-6, abs=1e-6)


def test_released_edge_cases_differ_as_documented():
    """n_i = 1: the released weight cancels to 0 in float32 (ours: α); no supervised token:
    released NaN (ours: 0)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, 5, generator=g)
    labels = torch.full((2, 6), IGN)
    labels[0, 2:5] = torch.tensor([1, 2, 3])  # n = 3
    labels[1, 4] = 4  # n = 1
    alpha = 0.3
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, 5), labels[:, 1:].reshape(-1), reduction="none")
    ce = ce.view(2, 5)
    row0 = alpha * ce[0, 1] + 3 * (1 - alpha) / 2 * (ce[0, 2] + ce[0, 3])
    released = released_compute_loss(logits, labels, alpha)
    assert released.item() == pytest.approx((row0 / 4).item(), rel=1e-5)  # row 1 weighs 0
    ours = first_token_weighted_loss(logits, labels, alpha=alpha, mode="reference")
    assert ours.item() == pytest.approx(((row0 + alpha * ce[1, 3]) / 4).item(), rel=1e-5)

    empty = torch.full((2, 6), IGN)
    assert torch.isnan(released_compute_loss(logits, empty, alpha))
    assert first_token_weighted_loss(logits, empty, alpha=alpha, mode="reference").item() == 0.0
