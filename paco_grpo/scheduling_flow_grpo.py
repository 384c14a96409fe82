"""The Flow-GRPO stochastic step as a diffusers-style scheduler.

:class:`FlowGRPOScheduler` wraps :func:`paco_grpo.sde.sde_step` (``sde_type="sde"``) or
:func:`paco_grpo.sde.cps_step` (``sde_type="cps"``; the equations and their citation live
there) behind a scheduler's ``step()``, which returns a
:class:`FlowGRPOSchedulerOutput` with the next sample *and* its log-probability, as
diffusers' schedulers return ``prev_sample``. Sampling calls it with noise at the SDE steps
and without at the ODE steps; training calls it with the recorded ``prev_sample`` to
re-score a transition under the current policy.

    >>> import torch
    >>> scheduler = FlowGRPOScheduler(noise_level=0.7)
    >>> out = scheduler.step(torch.ones(1, 4, 2), 0.8, 0.6, torch.zeros(1, 4, 2), sigma_max=0.9)
    >>> out.prev_sample.shape, out.log_prob.shape
    (torch.Size([1, 4, 2]), torch.Size([1]))
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paco_grpo.sde import CPS_LOG_PROBS, SDE_TYPES, cps_step, sde_step
from paco_reward.errors import InputError

__all__ = ["FlowGRPOScheduler", "FlowGRPOSchedulerOutput"]


@dataclass
class FlowGRPOSchedulerOutput:
    """One step's result.

    Attributes:
        prev_sample: the latents at ``sigma_next`` (``x`` of the next step).
        log_prob: Gaussian log-density of ``prev_sample`` under the step, averaged over the
            non-batch elements, shape ``(batch,)``; NaN for a deterministic (ODE) step. With
            ``sde_type="cps"`` and ``cps_log_prob="released"``, the released surrogate
            ``-mean((prev_sample - prev_sample_mean)**2)`` instead.
        prev_sample_mean: the step's mean.
        std: the step's standard deviation, broadcastable to ``prev_sample``.
    """

    prev_sample: torch.Tensor
    log_prob: torch.Tensor
    prev_sample_mean: torch.Tensor
    std: torch.Tensor


class FlowGRPOScheduler:
    """The stochastic step of a rectified-flow sampler with its log-probability.

    A step with noise level 0 is the Euler ODE step of diffusers'
    ``FlowMatchEulerDiscreteScheduler`` whatever ``sde_type`` is, so the deterministic steps
    of a sampling run (and evaluation) are the same with either step.

    Args:
        noise_level: ``a``; for ``"sde"`` in ``std_t = a * sqrt(sigma / (1 - sigma))``, for
            ``"cps"`` in ``std = sigma_next * sin(a * pi / 2)`` (``0 <= a <= 1``).
        sde_type: ``"sde"`` (Flow-GRPO's SDE, :func:`paco_grpo.sde.sde_step`) or ``"cps"``
            (coefficient-preserving sampling, :func:`paco_grpo.sde.cps_step`).
        cps_log_prob: the log-probability of a CPS step: ``"gaussian"`` (the transition's
            density, default) or ``"released"`` (the released code's unnormalised surrogate;
            see :func:`paco_grpo.sde.cps_step` for what it does to the PPO ratio). Ignored
            with ``sde_type="sde"``.

    Example:
        >>> cps = FlowGRPOScheduler(noise_level=0.8, sde_type="cps")
        >>> out = cps.step(torch.ones(1, 4, 2), 0.8, 0.6, torch.zeros(1, 4, 2), sigma_max=0.9)
        >>> round(float(out.std.flatten()[0]), 4)  # 0.6 * sin(0.4 pi)
        0.5706
    """

    def __init__(
        self, noise_level: float = 0.7, sde_type: str = "sde", cps_log_prob: str = "gaussian"
    ) -> None:
        if sde_type not in SDE_TYPES:
            raise InputError(f"sde_type must be one of {SDE_TYPES}; got {sde_type!r}.")
        if cps_log_prob not in CPS_LOG_PROBS:
            raise InputError(f"cps_log_prob must be one of {CPS_LOG_PROBS}; got {cps_log_prob!r}.")
        if noise_level < 0 or (sde_type == "cps" and noise_level > 1):
            bound = "in [0, 1] for CPS" if sde_type == "cps" else ">= 0"
            raise InputError(f"noise_level must be {bound}; got {noise_level}.")
        self.noise_level = float(noise_level)
        self.sde_type = sde_type
        self.cps_log_prob = cps_log_prob

    def step(
        self,
        model_output: torch.Tensor,
        sigma: float | torch.Tensor,
        sigma_next: float | torch.Tensor,
        sample: torch.Tensor,
        *,
        sigma_max: float,
        noise_level: float | None = None,
        prev_sample: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> FlowGRPOSchedulerOutput:
        """Step ``sample`` from ``sigma`` to ``sigma_next`` with velocity ``model_output``.

        Args:
            model_output: the transformer's velocity prediction.
            sigma / sigma_next: current and next noise levels (floats or per-sample tensors).
            sample: the current latents.
            sigma_max: the schedule's largest sigma below 1 (used where ``sigma == 1`` by the
                SDE step; not used by CPS).
            noise_level: override this scheduler's ``a`` for one step (0 = ODE step).
            prev_sample: a recorded next sample to score instead of drawing one.
            generator: seeds the noise.
        """
        level = self.noise_level if noise_level is None else noise_level
        if self.sde_type == "cps" and level != 0:
            x_next, log_prob, mean, std = cps_step(
                sample,
                model_output,
                sigma,
                sigma_next,
                level,
                prev_sample=prev_sample,
                generator=generator,
                log_prob=self.cps_log_prob,
            )
            return FlowGRPOSchedulerOutput(x_next, log_prob, mean, std)
        x_next, log_prob, mean, std = sde_step(
            sample,
            model_output,
            sigma,
            sigma_next,
            level,
            sigma_max,
            prev_sample=prev_sample,
            generator=generator,
        )
        return FlowGRPOSchedulerOutput(x_next, log_prob, mean, std)
