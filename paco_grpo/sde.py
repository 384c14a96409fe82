"""The Flow-GRPO SDE step: one stochastic Euler step of a rectified-flow sampler with
the Gaussian log-density of its transition.

Flow-GRPO (Liu et al. 2025, "Flow-GRPO: Training Flow Matching Models via Online RL",
eq. 9-10) turns the deterministic flow ODE ``dx = v dt`` into a reverse-time SDE with
the same marginals, so that each step is a Gaussian policy whose log-probability a
PPO/GRPO objective can use. With ``dt = sigma_next - sigma < 0``::

    std_t = a * sqrt(sigma / (1 - s)),  s = sigma_max if sigma == 1 else sigma
    mean  = x * (1 + std_t**2 * dt / (2 sigma)) + v * (1 + std_t**2 * (1 - sigma) / (2 sigma)) * dt
    x_next = mean + std_t * sqrt(-dt) * eps,   eps ~ N(0, I)

``a`` (``noise_level``) = 0 gives the plain Euler ODE step ``x + v dt`` that diffusers'
``FlowMatchEulerDiscreteScheduler`` takes.

    >>> import torch
    >>> x, v = torch.zeros(1, 4, 2), torch.ones(1, 4, 2)
    >>> x_next, log_prob, mean, std = sde_step(x, v, 0.8, 0.6, 0.7, 0.9)
    >>> x_next.shape, log_prob.shape
    (torch.Size([1, 4, 2]), torch.Size([1]))
"""

from __future__ import annotations

import math

import torch

__all__ = ["sde_step"]


def _as_batch_tensor(value, like: torch.Tensor) -> torch.Tensor:
    """A float or per-sample tensor broadcast over the non-batch dims of ``like``."""
    t = torch.as_tensor(value, dtype=torch.float32, device=like.device)
    while t.ndim < like.ndim:
        t = t.unsqueeze(-1)
    return t


def sde_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: float | torch.Tensor,
    sigma_next: float | torch.Tensor,
    noise_level: float,
    sigma_max: float,
    noise: torch.Tensor | None = None,
    prev_sample: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Flow-GRPO SDE step from ``sigma`` to ``sigma_next`` and its log-probability.

    Args:
        x: current latents ``(batch, ...)``.
        v: the model's velocity prediction, same shape as ``x``.
        sigma / sigma_next: current and next noise levels (floats or per-sample tensors),
            ``sigma_next < sigma``.
        noise_level: ``a`` in ``std_t = a * sqrt(sigma / (1 - sigma))``; 0 is the Euler ODE step.
        sigma_max: used in place of ``sigma`` inside ``1 - sigma`` when ``sigma == 1`` (Flow-GRPO
            passes the scheduler's second sigma), so the first step's std stays finite.
        noise: optional standard normal ``eps``; drawn with ``generator`` when omitted.
        prev_sample: when given, the step is not sampled: ``x_next = prev_sample`` and the
            log-probability is that of ``prev_sample`` (used to re-evaluate a recorded
            trajectory under the current policy).
        generator: torch generator for ``noise`` when it is drawn here.

    Returns:
        ``(x_next, log_prob, mean, std)``: ``log_prob`` is the Gaussian log-density of
        ``x_next`` under ``N(mean, std**2)`` averaged over all non-batch elements, shape
        ``(batch,)``; ``std = std_t * sqrt(-dt)`` broadcastable to ``x``. Computed in float32;
        ``x_next`` and ``mean`` are returned in ``x``'s dtype. With ``noise_level == 0`` the
        density is degenerate and ``log_prob`` is NaN.

    Example:
        >>> x = torch.randn(2, 16, 8); v = torch.randn(2, 16, 8)
        >>> x1, lp, mean, std = sde_step(x, v, 1.0, 0.9, 0.0, 0.9)
        >>> torch.allclose(x1, x - 0.1 * v)
        True
    """
    if noise_level < 0:
        raise ValueError(f"noise_level must be >= 0; got {noise_level}.")
    out_dtype = x.dtype
    xf, vf = x.float(), v.float()
    sigma_t = _as_batch_tensor(sigma, xf)
    sigma_next_t = _as_batch_tensor(sigma_next, xf)
    dt = sigma_next_t - sigma_t
    denominator = 1 - torch.where(sigma_t == 1, torch.as_tensor(float(sigma_max)), sigma_t)
    std_t = torch.sqrt(sigma_t / denominator) * noise_level
    mean = (
        xf * (1 + std_t**2 / (2 * sigma_t) * dt)
        + vf * (1 + std_t**2 * (1 - sigma_t) / (2 * sigma_t)) * dt
    )
    std = std_t * torch.sqrt(-dt)
    if prev_sample is not None:
        x_next = prev_sample.float()
    elif noise_level == 0:
        x_next = mean
    else:
        if noise is None:
            noise = torch.randn(xf.shape, generator=generator, device=xf.device, dtype=xf.dtype)
        # Rounded to x's dtype first: the log-probability is that of the sample as returned
        # and stored, so re-scoring it (``prev_sample``) in bf16 gives the same value.
        x_next = (mean + std * noise.float()).to(out_dtype).float()
    if noise_level == 0:
        log_prob = torch.full((x.shape[0],), math.nan, device=x.device)
    else:
        log_prob = (
            -((x_next.detach() - mean) ** 2) / (2 * std**2)
            - torch.log(std)
            - 0.5 * math.log(2 * math.pi)
        )
        log_prob = log_prob.mean(dim=tuple(range(1, log_prob.ndim)))
    return x_next.to(out_dtype), log_prob, mean.to(out_dtype), std
