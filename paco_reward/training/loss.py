"""First-token-weighted SFT loss of PaCo-Reward (arXiv 2512.04784, Sec. "Training objective").

The evaluator's answer is ``"Yes"``/``"No"`` followed by reasons and the end-of-turn token.
At scoring time only the first answer token matters, so the paper up-weights it with α.

Two modes, both over the *supervised* tokens of each sequence (labels != -100, after the
causal shift), where token 0 is the decision token and ``n`` is the number of supervised
tokens of that sequence:

``mode="paper"`` (default), the paper's objective (Eq. 3)::

    L_i = α · CE_0 + (1 − α) / (n − 1) · Σ_{k ≥ 1} CE_k        (L_i = CE_0 when n = 1)
    L   = Σ_i L_i / (number of sequences)

  α = 1/n gives every token weight 1/n: plain per-sequence-averaged MLE.

``mode="reference"``, the released PaCo-RL training code (``CustomSeq2SeqTrainer.compute_loss``
in ``PaCo-Reward/LLaMA-Factory/src/llamafactory/train/sft/trainer.py``, kept so PaCo-Reward-7B
can be reproduced): the decision token gets weight α and every other supervised token
n_i(1 − α)/(n_i − 1), and the weighted sum is averaged over the supervised tokens::

    L = Σ_i [ α · CE_0 + n_i(1 − α)/(n_i − 1) · Σ_{k ≥ 1} CE_k ] / (number of tokens)

  Each sequence's weights sum to n_i, so α = 1/n_i is plain token-averaged MLE.

Where the released code differs, on purpose:

- normaliser: it divides by the micro-batch's token count; we divide by the count over the
  whole accumulated batch (below), so gradient accumulation does not change the loss.
- a sequence with one supervised token (n_i = 1): the released weights are computed as
  ``w + (α − w)`` with ``w = (1 − α)/1e-8``, which cancels to 0 in float32, so such a
  sequence is not trained at all; here its decision token gets weight α (the exact value
  of the released expression).
- a batch with no supervised token: the released loss is 0/0 = NaN; here it is 0 (with a
  gradient), so an empty micro-batch cannot poison an accumulated step.

The normaliser (sequences for ``paper``, tokens for ``reference``) defaults to the
micro-batch's own count. The trainer passes the count over the *whole accumulated batch*
(``num_items``), so gradient accumulation does not change the loss scale: one batch of 4
and two accumulated batches of 2 give the same gradients.

    >>> import torch
    >>> logits = torch.zeros(1, 3, 4)
    >>> labels = torch.tensor([[-100, 1, 2]])
    >>> round(float(first_token_weighted_loss(logits, labels, alpha=0.5)), 4)  # ln 4
    1.3863
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from paco_reward.errors import InputError

LOSS_MODES = ("paper", "reference")
IGNORE_INDEX = -100


def _check(alpha: float | None, mode: str) -> None:
    if mode not in LOSS_MODES:
        raise InputError(f"loss mode {mode!r} is not one of {LOSS_MODES}.")
    if alpha is not None and not 0.0 <= alpha <= 1.0:
        raise InputError(f"alpha (first_token_weight) must be in [0, 1]; got {alpha!r}.")


def supervised_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For *shifted* labels ``[B, T]``: the mask of supervised tokens, each token's rank
    within its sequence (0 = decision token) and each sequence's supervised count ``n``."""
    mask = labels.ne(IGNORE_INDEX)
    rank = mask.long().cumsum(-1) - 1
    count = mask.sum(-1)
    return mask, rank, count


def token_weights(labels: torch.Tensor, alpha: float | None, mode: str = "paper") -> torch.Tensor:
    """Per-token loss weights ``[B, T]`` for *shifted* labels (0 where unsupervised).

    ``alpha=None`` means uniform: 1/n per token in ``paper`` mode (plain per-sequence MLE),
    1 per token in ``reference`` mode (plain token-averaged MLE).
    """
    _check(alpha, mode)
    mask, rank, count = supervised_positions(labels)
    n = count.clamp(min=1).to(torch.float64).unsqueeze(-1).expand_as(labels)
    first = mask & rank.eq(0)
    rest = mask & rank.gt(0)
    weights = torch.zeros(labels.shape, dtype=torch.float64, device=labels.device)
    if alpha is None:
        uniform = 1.0 / n if mode == "paper" else torch.ones_like(n)
        return torch.where(mask, uniform, weights)
    others = (n - 1).clamp(min=1)
    if mode == "paper":
        decision = torch.where(n.eq(1), torch.ones_like(n), torch.full_like(n, alpha))
        weights = torch.where(first, decision, weights)
        weights = torch.where(rest, (1.0 - alpha) / others, weights)
    else:
        weights = torch.where(first, torch.full_like(n, alpha), weights)
        weights = torch.where(rest, n * (1.0 - alpha) / others, weights)
    return weights


def loss_normaliser(labels: torch.Tensor, mode: str = "paper", shifted: bool = False) -> int:
    """What the loss is divided by: the number of sequences with a supervised token
    (``paper``) or of supervised tokens (``reference``). ``labels`` are unshifted unless
    ``shifted=True``."""
    if not shifted:
        labels = labels[..., 1:]
    mask = labels.ne(IGNORE_INDEX)
    if mode == "paper":
        return int(mask.any(-1).sum())
    return int(mask.sum())


def first_token_weighted_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    alpha: float | None = 0.1,
    mode: str = "paper",
    num_items: int | float | torch.Tensor | None = None,
) -> torch.Tensor:
    """The PaCo-Reward SFT loss (see the module docstring for both modes).

    Args:
        logits: ``[B, T, V]`` next-token logits, as a causal LM returns them.
        labels: ``[B, T]`` token ids aligned with the *inputs* (Hugging Face convention:
            the loss shifts them by one), ``-100`` on prompt and padding tokens.
        alpha: weight of the decision token, in [0, 1]; ``None`` = uniform (plain MLE).
        mode: ``"paper"`` or ``"reference"``.
        num_items: normaliser over the whole accumulated batch (sequences for ``paper``,
            tokens for ``reference``); defaults to this micro-batch's count.

    Returns:
        A scalar float32 loss.

    Example:
        >>> loss = first_token_weighted_loss(out.logits, batch["labels"], alpha=0.1)  # doctest: +SKIP
    """
    _check(alpha, mode)
    if logits.shape[:2] != labels.shape:
        raise InputError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} disagree on "
            "[batch, length]; pass the model's full logits and the collator's labels."
        )
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:]
    weights = token_weights(shift_labels, alpha, mode).to(shift_logits.dtype)
    ce = F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.shape[-1]),
        shift_labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view_as(shift_labels)
    total = (weights * ce).sum()
    if num_items is None:
        num_items = loss_normaliser(shift_labels, mode, shifted=True)
    if torch.is_tensor(num_items):
        num_items = num_items.to(total.device, total.dtype)
    elif num_items == 0:
        return total * 0.0
    return total / num_items
