"""A run stops when its rewards fail: the failure budget of an epoch.

A reward scores NaN for an item whose input it cannot read, or for the items of a batch
whose service failed past its retry policy (:mod:`paco_grpo.rewards.base`). A few such
samples are left out of their group's statistics (:func:`paco_grpo.advantages.compute_advantages`).
Past ``max_failed_fraction`` of an epoch's samples, though, failures are no longer
sporadic (a judge's server died, a prompt file lost its layouts), and training on the rest
would take optimizer steps on a signal that is not there: the trainer raises
:class:`RewardFailureError` instead, after the epoch's rewards are gathered and before any
optimizer step on them. Every process holds the gathered rewards, so every process makes
the same decision and raises at once; none is left waiting in a collective.

    >>> import numpy as np
    >>> over_budget({"consistency": np.array([np.nan, np.nan, 0.5, 0.7])}, 0.1)
    {'consistency': 2}
    >>> over_budget({"consistency": np.array([np.nan, 0.4, 0.5, 0.7])}, 0.25)
    {}
    >>> over_budget({"logged": np.array([np.nan, np.nan])}, 0.1, weights={"logged": 0.0})
    {}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from paco_reward.errors import PacoError

logger = logging.getLogger(__name__)

__all__ = [
    "RewardFailureError",
    "log_sporadic_failures",
    "over_budget",
    "pop_failure_reasons",
    "reward_failure_error",
]


class RewardFailureError(PacoError, RuntimeError):
    """A reward failed on more than ``max_failed_fraction`` of an epoch's samples, so the run
    stopped before training on them. The last checkpoint is intact: fix the reward (restart
    its server) and continue with ``--resume_from_checkpoint latest``.

    Attributes:
        reward: the reward's name in the recipe.
        num_failed / num_samples: NaN scores among the epoch's samples (all processes).
        epoch: the epoch that stopped (counted from 1, as in ``metrics.jsonl`` and checkpoints).
        reasons: the first reasons the processes recorded (``images[k]: Error: message``).
    """

    def __init__(
        self,
        message: str,
        *,
        reward: str,
        num_failed: int,
        num_samples: int,
        epoch: int,
        reasons: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.reward = reward
        self.num_failed = num_failed
        self.num_samples = num_samples
        self.epoch = epoch
        self.reasons = list(reasons)


def over_budget(
    rewards: Mapping[str, np.ndarray],
    max_failed_fraction: float,
    weights: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """``{name: NaN count}`` of the rewards whose NaN share is over ``max_failed_fraction``.

    With ``weights``, a reward of weight 0 (logged, not trained on) never counts: its NaN
    scores leave no sample out of the advantages."""
    counts = {
        name: int(np.isnan(scores).sum())
        for name, scores in rewards.items()
        if weights is None or weights.get(name, 1.0) != 0
    }
    return {
        name: count
        for name, count in counts.items()
        if count and count > max_failed_fraction * len(rewards[name])
    }


def pop_failure_reasons(reward) -> list[str]:
    """The reasons a reward recorded since the last call (``[]`` for a plain callable, which
    cannot say why it returned NaN)."""
    pop = getattr(reward, "pop_failure_reasons", None)
    return list(pop()) if pop is not None else []


def log_sporadic_failures(
    rewards: Mapping[str, np.ndarray], max_failed_fraction: float, epoch: int
) -> None:
    """Warn, per reward, about NaN scores within the budget (they are left out of their group)."""
    for name, scores in rewards.items():
        count = int(np.isnan(scores).sum())
        if count:
            logger.warning(
                "Epoch %d: reward %r failed on %d of %d samples (%.1f%%, within "
                "max_failed_fraction=%g); they are left out of their group's statistics.",
                epoch, name, count, len(scores), 100 * count / len(scores), max_failed_fraction,
            )  # fmt: skip


def reward_failure_error(
    name: str,
    num_failed: int,
    num_samples: int,
    *,
    epoch: int,
    max_failed_fraction: float,
    reasons: Sequence[str],
    checkpoint: str | None,
    also: Mapping[str, int] | None = None,
) -> RewardFailureError:
    """The error that stops a run, saying what failed, why, and how to go on (``also``: the
    other rewards over the budget, ``{name: NaN count}``)."""
    shown = "\n".join(f"  - {r}" for r in reasons[:5]) or "  - (the reward gave no reason)"
    resume = (
        f"The last checkpoint, {checkpoint}, is intact: once the reward works again (restart "
        "its server), continue with --resume_from_checkpoint latest."
        if checkpoint
        else "No checkpoint was written yet; once the reward works again, start the run again."
    )
    message = (
        f"Reward {name!r} failed on {num_failed} of {num_samples} samples of epoch {epoch} "
        f"({100 * num_failed / num_samples:.0f}%, over max_failed_fraction="
        f"{max_failed_fraction:g}); the run stopped before training on them. First reasons:\n"
        f"{shown}\n{resume}"
    )
    if also:
        others = ", ".join(f"{n!r} ({c} of {num_samples})" for n, c in also.items())
        message += f"\nAlso over the budget: {others}."
    return RewardFailureError(
        message,
        reward=name,
        num_failed=num_failed,
        num_samples=num_samples,
        epoch=epoch,
        reasons=reasons,
    )
