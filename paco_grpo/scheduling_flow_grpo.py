"""The Flow-GRPO SDE step as a diffusers-style scheduler.

:class:`FlowGRPOScheduler` wraps :func:`paco_grpo.sde.sde_step` (the equations and their
citation live there) behind a scheduler's ``step()``, which returns a
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

from paco_grpo.sde import sde_step

__all__ = ["FlowGRPOScheduler", "FlowGRPOSchedulerOutput"]


@dataclass
class FlowGRPOSchedulerOutput:
    """One step's result.

    Attributes:
        prev_sample: the latents at ``sigma_next`` (``x`` of the next step).
        log_prob: Gaussian log-density of ``prev_sample`` under the step, averaged over the
            non-batch elements, shape ``(batch,)``; NaN for a deterministic (ODE) step.
        prev_sample_mean: the step's mean.
        std: the step's standard deviation, broadcastable to ``prev_sample``.
    """

    prev_sample: torch.Tensor
    log_prob: torch.Tensor
    prev_sample_mean: torch.Tensor
    std: torch.Tensor


class FlowGRPOScheduler:
    """The reverse-time SDE step of a rectified-flow sampler with its log-probability.

    Args:
        noise_level: ``a`` in ``std_t = a * sqrt(sigma / (1 - sigma))``; 0 gives the Euler
            ODE step of diffusers' ``FlowMatchEulerDiscreteScheduler``.
    """

    def __init__(self, noise_level: float = 0.7) -> None:
        if noise_level < 0:
            raise ValueError(f"noise_level must be >= 0; got {noise_level}.")
        self.noise_level = float(noise_level)

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
            sigma_max: the schedule's largest sigma below 1 (used where ``sigma == 1``).
            noise_level: override this scheduler's ``a`` for one step (0 = ODE step).
            prev_sample: a recorded next sample to score instead of drawing one.
            generator: seeds the noise.
        """
        level = self.noise_level if noise_level is None else noise_level
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
