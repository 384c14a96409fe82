"""GARDO's pieces against reward hacking (He et al. 2025, arXiv 2512.24138; released code
tinnerhrhe/GARDO, ``scripts/train_sd3_grpo_gardo.py`` and ``flow_grpo/stat_tracking.py``
type ``gardo``), as pure functions the trainer calls; each is an option of
:class:`~paco_grpo.grpo_config.GRPOConfig` usable alone:

- :func:`rank_uncertainty`: how much the proxy (the aggregated, trained score) and the
  auxiliary rewards (weight 0 in the advantage) disagree about each sample, from ranks
  over the whole gathered batch;
- :func:`uncertainty_gate` and :class:`KappaController`: the KL term acts only on the
  most uncertain share ``kappa`` of the samples, ``kappa`` adapting each epoch;
- :func:`gated_kl`: ``mean |mu_theta - mu_ref|^2 / (2 sigma_t^2)`` over the gated samples;
- :class:`ReferenceResetRule`: when the reference adapter is reset to the current policy;
- :func:`diversity_advantages`: the diversity-aware advantage.

    >>> import numpy as np
    >>> u = rank_uncertainty(np.array([0.9, 0.5, 0.1]), [np.array([0.1, 0.5, 0.9])])
    >>> u.tolist()  # the proxy ranks sample 0 first, the auxiliary last: over-optimistic
    [2.0, 0.0, -2.0]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from paco_reward.errors import InputError

__all__ = [
    "KAPPA_MAX",
    "KAPPA_MIN",
    "KAPPA_RATE",
    "KAPPA_WINDOW",
    "UNCERTAINTY_SIGNS",
    "KappaController",
    "ReferenceResetRule",
    "descending_ranks",
    "diversity_advantages",
    "gated_kl",
    "min_cosine_distances",
    "rank_uncertainty",
    "uncertainty_gate",
]

# the released RiskCompensator's constants
KAPPA_MIN, KAPPA_MAX, KAPPA_RATE, KAPPA_WINDOW = 0.02, 0.2, 0.1, 20
UNCERTAINTY_SIGNS = ("paper", "released")


def descending_ranks(values: np.ndarray) -> np.ndarray:
    """Rank 1 = highest value; ties share the mean of the ranks they span.

    The released code ranks with ``torch.sort(descending=True)``, whose order among equal
    values is unspecified; the average rank is what that order gives on average, and the
    same rank wherever the values differ.

    >>> descending_ranks(np.array([0.2, 0.9, 0.2])).tolist()
    [2.5, 1.0, 2.5]
    """
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1, dtype=np.float64)
    for v in np.unique(values):  # ties: the mean of their ordinal ranks
        tie = values == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def rank_uncertainty(
    proxy: np.ndarray, auxiliaries: Sequence[np.ndarray], sign: str = "paper"
) -> np.ndarray:
    """Per-sample uncertainty of the proxy reward from ranks over the gathered batch.

    The released code computes ``rank(main) - mean(rank(aux_k))`` with rank 1 = best
    (``torch.sort(..., descending=True)``). **The sign, settled on a toy batch** (the
    proxy ranks a sample first, both auxiliaries rank it last, ``N`` samples): the released
    value is ``1 - N < 0``, so that sample is never gated (the gate keeps non-negative
    values only); the released gate selects the samples the proxy rates *worse* than the
    auxiliaries. The paper's stated aim is the opposite: regularise where the proxy is
    over-optimistic. ``sign="paper"`` (default) returns ``mean(rank(aux_k)) - rank(main)``,
    positive when the proxy is over-optimistic (the toy sample gets ``N - 1``);
    ``sign="released"`` returns the released value.

    NaN scores (failed items) get NaN uncertainty and are ranked after every score.

    Args:
        proxy: ``(n,)`` the score the advantage is computed from.
        auxiliaries: one ``(n,)`` array per auxiliary reward (at least one).
        sign: one of :data:`UNCERTAINTY_SIGNS`.
    """
    if sign not in UNCERTAINTY_SIGNS:
        raise InputError(f"sign must be one of {UNCERTAINTY_SIGNS}; got {sign!r}.")
    if not auxiliaries:
        raise InputError("rank_uncertainty needs at least one auxiliary reward.")
    proxy = np.asarray(proxy, dtype=np.float64)
    columns = [proxy, *(np.asarray(a, dtype=np.float64) for a in auxiliaries)]
    if any(c.shape != proxy.shape for c in columns):
        raise InputError(f"proxy and auxiliaries differ in shape: {[c.shape for c in columns]}.")
    failed = np.any([np.isnan(c) for c in columns], axis=0)
    ranks = [descending_ranks(np.where(np.isnan(c), -np.inf, c)) for c in columns]
    released = ranks[0] - np.mean(ranks[1:], axis=0)
    u = released if sign == "released" else -released
    return np.where(failed, np.nan, u + 0.0)  # + 0.0: no negative zeros


@dataclass
class KappaController:
    """The share ``kappa`` of samples the KL gate keeps (the released ``RiskCompensator``).

    Each epoch, with ``m`` the mean of the non-negative uncertainties: the first epoch
    keeps ``kappa = start``; later, ``kappa *= 1 + rate`` when ``m`` is above every value
    of the last ``window`` epochs, ``kappa *= 1 - rate`` when below every one; clipped to
    ``[KAPPA_MIN, KAPPA_MAX]``; then ``m`` joins the window.

    >>> c = KappaController()
    >>> [round(c.update(m), 4) for m in (1.0, 2.0, 1.5, 0.5)]
    [0.1, 0.11, 0.11, 0.099]
    """

    start: float = 0.1
    kappa: float = 0.1
    history: list[float] = field(default_factory=list)

    def update(self, mean_uncertainty: float) -> float:
        """Adapt ``kappa`` to this epoch's mean non-negative uncertainty; returns it."""
        m = float(mean_uncertainty)
        if not self.history:
            self.kappa = self.start
        elif m > max(self.history):
            self.kappa *= 1 + KAPPA_RATE
        elif m < min(self.history):
            self.kappa *= 1 - KAPPA_RATE
        self.kappa = float(np.clip(self.kappa, KAPPA_MIN, KAPPA_MAX))
        self.history = [*self.history, m][-KAPPA_WINDOW:]
        return self.kappa

    def state_dict(self) -> dict:
        return {"start": self.start, "kappa": self.kappa, "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.start, self.kappa = float(state["start"]), float(state["kappa"])
        self.history = [float(v) for v in state["history"]]


def uncertainty_gate(uncertainty: np.ndarray, controller: KappaController) -> np.ndarray:
    """Which samples get the KL term, as the released code picks them: among the
    non-negative uncertainties, those strictly above their ``(100 - 100 kappa)``-th
    percentile (numpy's linear interpolation), ``kappa`` first updated by ``controller``.
    With no non-negative (or no finite) value nothing is gated and ``kappa`` is unchanged.

    >>> uncertainty_gate(np.arange(10.0), KappaController()).nonzero()[0].tolist()
    [9]
    """
    u = np.asarray(uncertainty, dtype=np.float64)
    kept = u[np.isfinite(u) & (u >= 0)]
    if kept.size == 0:
        return np.zeros(u.shape, dtype=bool)
    kappa = controller.update(kept.mean())
    threshold = np.percentile(kept, 100 - 100 * kappa)
    return np.isfinite(u) & (u > threshold)


def gated_kl(
    mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor, gate: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample KL of two Gaussians with the same ``std`` and its gated mean.

    ``kl_i = mean_elements(|mean_i - ref_mean_i|^2) / (2 std_i^2)``; the term is the mean of
    ``kl_i`` over the gated samples (all samples with ``gate=None``), zero (with no
    gradient path) when none is gated. Gradients reach ``mean`` only through gated rows;
    ``ref_mean`` is expected detached (the reference runs under ``no_grad``).

    Returns:
        ``(kl, term)``: the ``(n,)`` per-sample KL (for logging) and the scalar term.
    """
    dims = tuple(range(1, mean.ndim))
    sigma = std.float().reshape(std.shape[0], -1)[:, 0]
    kl = ((mean.float() - ref_mean.float()) ** 2).mean(dim=dims) / (2 * sigma**2)
    if gate is None:
        return kl, kl.mean()
    gate = gate.to(device=kl.device, dtype=torch.bool)
    if not bool(gate.any()):
        return kl, kl.sum() * 0.0  # keeps the graph's shape; contributes no gradient
    return kl, kl[gate].mean()


@dataclass
class ReferenceResetRule:
    """When the reference adapter is reset to the current policy (the released rule).

    A logged optimizer step whose KL (mean over processes) exceeds ``kl_threshold`` marks
    a reset; the reset happens at the start of the next epoch's training. Independently,
    an epoch more than ``max_epochs`` after the last reset resets (the released
    ``epoch - prev_epoch > reset_freq``). Epoch 0 never resets on a mark (the reference
    was just copied).

    >>> rule = ReferenceResetRule(kl_threshold=3e-4, max_epochs=15)
    >>> rule.observe(5e-4); rule.should_reset(1)
    True
    """

    kl_threshold: float = 3e-4
    max_epochs: int = 15
    last_reset: int = 0
    pending: bool = False
    resets: list[int] = field(default_factory=list)

    def observe(self, step_kl: float) -> None:
        """One logged step's KL."""
        if step_kl > self.kl_threshold:
            self.pending = True

    def should_reset(self, epoch: int) -> bool:
        """Whether to reset before training ``epoch``; records the reset when it does."""
        if (epoch != 0 and self.pending) or epoch - self.last_reset > self.max_epochs:
            self.pending = False
            self.last_reset = epoch
            self.resets = [*self.resets, epoch]
            return True
        return False

    def state_dict(self) -> dict:
        return {"last_reset": self.last_reset, "pending": self.pending, "resets": self.resets}

    def load_state_dict(self, state: dict) -> None:
        self.last_reset, self.pending = int(state["last_reset"]), bool(state["pending"])
        self.resets = [int(e) for e in state["resets"]]


def min_cosine_distances(features: np.ndarray) -> np.ndarray:
    """Each row's smallest cosine distance ``1 - cos`` to the other rows (features are
    L2-normalised first; cosines clipped to [-1, 1])."""
    f = np.asarray(features, dtype=np.float64)
    if len(f) < 2:
        raise InputError("a diversity distance needs at least 2 samples in a group.")
    f = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
    distance = 1.0 - np.clip(f @ f.T, -1.0, 1.0)
    np.fill_diagonal(distance, np.inf)
    return distance.min(axis=1)


def diversity_advantages(
    scores: np.ndarray,
    group_ids: Sequence[Hashable],
    features: np.ndarray,
    clip: float = 5.0,
) -> np.ndarray:
    """GARDO's diversity-aware advantage, per prompt group (no division by a std).

    ``d_i`` is a sample's minimum cosine distance to the others of its group; a sample at
    or above its group's mean score gets ``A_i = (r_i - mean) * d_i / mean(d)``, one below
    it ``A_i = r_i - mean``; then clipped to ``[-clip, clip]``. Failed samples (NaN score)
    get 0 and are left out of their group's mean and distances. A group whose images are
    all identical (``mean(d) = 0``) gets the multiplier 1: no diversity to reward, the
    released code's 0/0 is NaN.

    >>> s = np.array([1.0, 0.0, 1.0, 0.0])
    >>> f = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.6, 0.8]])
    >>> np.round(diversity_advantages(s, [0, 0, 0, 0], f), 3).tolist()
    [0.024, -0.5, 0.024, -0.5]
    """
    scores = np.asarray(scores, dtype=np.float64)
    features = np.asarray(features, dtype=np.float64)
    keys = list(group_ids)
    if not (len(scores) == len(keys) == len(features)):
        raise InputError(
            f"scores ({len(scores)}), group_ids ({len(keys)}) and features ({len(features)}) "
            "must have one entry per sample."
        )
    out = np.zeros(len(scores))
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        if np.isfinite(scores[i]):
            groups.setdefault(key, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue  # a group of one has no relative advantage
        r = scores[members]
        centred = r - r.mean()
        d = min_cosine_distances(features[members])
        multiplier = d / d.mean() if d.mean() > 0 else np.ones_like(d)
        out[members] = np.where(centred < 0, centred, centred * multiplier)
    return np.clip(out, -clip, clip)
