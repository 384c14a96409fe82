"""Sigmas and timesteps exactly as diffusers' ``FluxPipeline`` computes them.

FLUX shifts its schedule with the image's token count (``calculate_shift``: a line
through (256 tokens, 0.5) and (4096 tokens, 1.15)), so 512² and 1024² images use
different sigmas for the same number of steps. This module calls diffusers' own
``calculate_shift`` / ``retrieve_timesteps`` on the pipeline's scheduler config, so
sampling here follows diffusers step for step.

    >>> from diffusers import FlowMatchEulerDiscreteScheduler
    >>> scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    >>> schedule = flux_schedule(scheduler, num_steps=10, image_seq_len=1024)
    >>> len(schedule.timesteps), len(schedule.sigmas)
    (10, 11)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["FluxSchedule", "flux_schedule", "image_seq_len"]


@dataclass(frozen=True)
class FluxSchedule:
    """A sampling schedule: ``timesteps`` (num_steps,) in [0, 1000] and ``sigmas``
    (num_steps + 1,) ending with 0; ``mu`` is the resolution shift used."""

    timesteps: torch.Tensor
    sigmas: torch.Tensor
    mu: float

    @property
    def sigma_max(self) -> float:
        """The value Flow-GRPO uses for ``sigma`` in ``1 - sigma`` at the first step (sigmas[1])."""
        return float(self.sigmas[1]) if len(self.sigmas) > 1 else float(self.sigmas[0])


def image_seq_len(height: int, width: int, vae_scale_factor: int) -> int:
    """Number of packed latent tokens of a ``height x width`` image, as ``FluxPipeline`` counts.

    Example:
        >>> image_seq_len(1024, 1024, 8)
        4096
    """
    h = 2 * (int(height) // (vae_scale_factor * 2))
    w = 2 * (int(width) // (vae_scale_factor * 2))
    return (h // 2) * (w // 2)


def flux_schedule(
    scheduler,
    num_steps: int,
    image_seq_len: int,
    device: torch.device | str | None = None,
    mu: float | None = None,
) -> FluxSchedule:
    """Timesteps and sigmas for ``num_steps`` at ``image_seq_len`` tokens, as ``FluxPipeline``.

    The scheduler is copied, so the caller's scheduler state is not touched.

    Args:
        scheduler: a ``FlowMatchEulerDiscreteScheduler`` (the pipeline's).
        num_steps: number of denoising steps (>= 1).
        image_seq_len: packed latent tokens (see :func:`image_seq_len`).
        device: where the tensors go.
        mu: the resolution shift; default FLUX.1's ``calculate_shift`` of ``image_seq_len``
            with the scheduler's config (FLUX.2 passes its ``compute_empirical_mu``).
    """
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift, retrieve_timesteps

    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1; got {num_steps}.")
    scheduler = copy.deepcopy(scheduler)
    sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
    if getattr(scheduler.config, "use_flow_sigmas", False):
        sigmas = None
    if mu is None:
        mu = calculate_shift(
            image_seq_len,
            scheduler.config.get("base_image_seq_len", 256),
            scheduler.config.get("max_image_seq_len", 4096),
            scheduler.config.get("base_shift", 0.5),
            scheduler.config.get("max_shift", 1.15),
        )
    timesteps, _ = retrieve_timesteps(scheduler, num_steps, device, sigmas=sigmas, mu=mu)
    return FluxSchedule(timesteps=timesteps, sigmas=scheduler.sigmas.to(device), mu=float(mu))
