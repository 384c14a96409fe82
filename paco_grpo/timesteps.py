"""Sigmas and timesteps exactly as diffusers' ``FluxPipeline`` (and
``StableDiffusion3Pipeline``) computes them.

FLUX shifts its schedule with the image's token count (``calculate_shift``: a line
through (256 tokens, 0.5) and (4096 tokens, 1.15)), so 512² and 1024² images use
different sigmas for the same number of steps. This module calls diffusers' own
``calculate_shift`` / ``retrieve_timesteps`` on the pipeline's scheduler config, so
sampling here follows diffusers step for step. Stable Diffusion 3.5 shifts by a constant
instead (its scheduler's ``shift``, 3.0, without dynamic shifting): :func:`sd3_schedule`.

    >>> from diffusers import FlowMatchEulerDiscreteScheduler
    >>> scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    >>> schedule = flux_schedule(scheduler, num_steps=10, image_seq_len=1024)
    >>> len(schedule.timesteps), len(schedule.sigmas)
    (10, 11)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch

from paco_reward.errors import InputError

__all__ = ["FluxSchedule", "flux_schedule", "image_seq_len", "sd3_schedule"]


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
    sigmas: list[float] | None = None,
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
        sigmas: the unshifted sigmas; default ``np.linspace(1, 1 / num_steps, num_steps)``
            as ``FluxPipeline`` (Z-Image's pipeline passes a float32 ``torch.linspace``).
    """
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    if num_steps < 1:
        raise InputError(f"num_steps must be >= 1; got {num_steps}.")
    if sigmas is None:
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
    return _retrieve(scheduler, num_steps, device, sigmas, mu)


def sd3_schedule(
    scheduler, num_steps: int, image_seq_len: int, device: torch.device | str | None = None
) -> FluxSchedule:
    """Timesteps and sigmas for ``num_steps``, as ``StableDiffusion3Pipeline`` computes them:
    the scheduler's own sigmas (no ``sigmas=`` argument), shifted by its static ``shift``
    (``mu = log(shift)``: the exponential shift at ``mu`` is the static shift by ``e**mu``),
    or, with ``use_dynamic_shifting``, by ``mu`` from ``image_seq_len`` as the pipeline does.

    Args:
        scheduler: a ``FlowMatchEulerDiscreteScheduler`` (the pipeline's); copied, not touched.
        num_steps: number of denoising steps (>= 1).
        image_seq_len: image tokens (latent pixels / patch_size**2); used only with dynamic
            shifting.
        device: where the tensors go.

    Example:
        >>> from diffusers import FlowMatchEulerDiscreteScheduler
        >>> schedule = sd3_schedule(FlowMatchEulerDiscreteScheduler(shift=3.0), 4, 1024)
        >>> [round(float(s), 3) for s in schedule.sigmas]
        [1.0, 0.858, 0.602, 0.009, 0.0]
    """
    from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import (
        calculate_shift,
    )

    if num_steps < 1:
        raise InputError(f"num_steps must be >= 1; got {num_steps}.")
    config = scheduler.config
    if not config.get("use_dynamic_shifting", False):
        return _retrieve(scheduler, num_steps, device, None, None)
    mu = calculate_shift(
        image_seq_len,
        config.get("base_image_seq_len", 256),
        config.get("max_image_seq_len", 4096),
        config.get("base_shift", 0.5),
        config.get("max_shift", 1.16),  # StableDiffusion3Pipeline's default, not FLUX's 1.15
    )
    return _retrieve(scheduler, num_steps, device, None, mu)


def _retrieve(scheduler, num_steps, device, sigmas, mu) -> FluxSchedule:
    """diffusers' ``retrieve_timesteps`` on a copy of ``scheduler``; ``mu=None`` is the static
    shift, recorded as ``log(shift)``."""
    from diffusers.pipelines.flux.pipeline_flux import retrieve_timesteps

    scheduler = copy.deepcopy(scheduler)
    kwargs = {} if mu is None else {"mu": mu}
    timesteps, _ = retrieve_timesteps(scheduler, num_steps, device, sigmas=sigmas, **kwargs)
    mu = math.log(scheduler.config.get("shift", 1.0)) if mu is None else mu
    return FluxSchedule(timesteps=timesteps, sigmas=scheduler.sigmas.to(device), mu=float(mu))
