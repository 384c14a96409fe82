"""The PaCo-GRPO objective on one recorded SDE step: clipped PPO plus an optional KL term.

Flow-GRPO (Liu et al. 2025) treats each SDE step as a Gaussian policy: the ratio of the
current to the behaviour policy's log-probability of the recorded transition enters PPO's
clipped surrogate, and ``beta`` weighs a KL to the frozen base model. Both policies share
the step's ``std``, so the KL is a scaled squared distance of their means.
"""

from __future__ import annotations

import torch

from paco_grpo.gardo import gated_kl
from paco_reward.errors import InputError

__all__ = ["grpo_loss"]


def grpo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mean: torch.Tensor,
    ref_mean: torch.Tensor | None,
    std: torch.Tensor,
    epsilon: float,
    beta: float,
    kl_gate: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Clipped PPO objective on one SDE step plus ``beta`` x KL to the reference policy.

    ``ref_mean=None`` (the frozen base was not run, as at ``beta = 0``) leaves the KL out:
    no ``kl`` entry is returned.

    ``ratio = exp(log_prob - old_log_prob)``; the policy loss is
    ``mean(max(-A * ratio, -A * clip(ratio, 1 - epsilon, 1 + epsilon)))``. Both policies are Gaussians
    with the same ``std``, so ``KL = |mean - ref_mean|^2 / (2 std^2)`` (averaged over elements,
    like the log-probability). Returns the loss and the per-sample terms for logging.

    ``kl_gate`` (GARDO's uncertainty gate, a boolean per sample) keeps the KL term to the
    gated samples: ``beta x mean of their KL`` (:func:`paco_grpo.gardo.gated_kl`), logged
    as ``kl_gated``; the ungated samples' KL is still reported in ``kl`` but gets no gradient.

    Example:
        >>> z = torch.zeros(2)
        >>> out = grpo_loss(z, z, torch.tensor([1.0, -1.0]), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 1), 0.2, 0.0)
        >>> float(out["ratio"].mean()), float(out["policy_loss"])
        (1.0, 0.0)
    """
    if beta > 0 and ref_mean is None:
        raise InputError("beta > 0 needs the frozen base's step mean (ref_mean).")
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon)
    policy_loss = torch.maximum(unclipped, clipped).mean()
    terms = {
        "loss": policy_loss,
        "policy_loss": policy_loss,
        "ratio": ratio,
        "clip_fraction": ((ratio - 1).abs() > epsilon).float(),
        "approx_kl": 0.5 * (log_prob - old_log_prob) ** 2,
    }
    if ref_mean is not None:
        kl, term = gated_kl(mean, ref_mean, std, kl_gate)
        terms["kl"] = kl
        if kl_gate is not None:
            terms["kl_gated"] = term
        terms["loss"] = policy_loss + beta * term
    return terms
