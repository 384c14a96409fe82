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

:func:`cps_step` is the coefficient-preserving alternative (``train.sde_type: cps``) the
released PaCo-GRPO code offers; its docstring gives the equations and the choice of
log-probability.
"""

from __future__ import annotations

import math

import torch

from paco_reward.errors import InputError

__all__ = ["CPS_LOG_PROBS", "SDE_TYPES", "cps_step", "sde_step"]

# The stochastic steps ``train.sde_type`` picks, and the log-probabilities of a CPS step.
SDE_TYPES = ("sde", "cps")
CPS_LOG_PROBS = ("gaussian", "released")


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
        >>> torch.allclose(x1, x - 0.1 * v, atol=1e-6)  # 0.9 - 1.0 in float32 is not exactly -0.1
        True
    """
    if noise_level < 0:
        raise InputError(f"noise_level must be >= 0; got {noise_level}.")
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


def cps_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: float | torch.Tensor,
    sigma_next: float | torch.Tensor,
    noise_level: float,
    noise: torch.Tensor | None = None,
    prev_sample: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    log_prob: str = "gaussian",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One coefficient-preserving sampling (CPS) step from ``sigma`` to ``sigma_next``.

    CPS (Wang & Yu 2025, "Coefficients-Preserving Sampling for Reinforcement Learning with
    Flow Matching", arXiv 2509.05952; the ``cps`` flag of the released PaCo-GRPO code) is a
    DDIM-style step: it predicts the clean latents and the noise from the velocity and re-mixes
    them at ``sigma_next``, replacing part of the predicted noise by fresh noise. With
    ``a = noise_level`` and ``s' = sigma_next``::

        std   = s' * sin(a * pi / 2)
        x0    = x - sigma * v                    # predicted clean latents
        x1    = x + (1 - sigma) * v              # predicted noise
        mean  = (1 - s') * x0 + sqrt(s'**2 - std**2) * x1
        x_next = mean + std * eps,   eps ~ N(0, I)

    If ``x = (1 - sigma) z0 + sigma z1`` and ``v = z1 - z0`` exactly, then ``x0 = z0``,
    ``x1 = z1`` and ``x_next = (1 - s') z0 + s' * (cos(a pi/2) z1 + sin(a pi/2) eps)``: the
    clean coefficient is ``1 - s'`` and the noise has variance ``s'**2``, the marginal of the
    flow at ``s'`` (hence "coefficient preserving"; the Flow-GRPO SDE keeps it only in the
    limit of small steps). ``a = 0`` is the Euler step ``x + (s' - sigma) v`` (up to rounding)
    and ``a = 1`` redraws all the noise; ``0 <= a <= 1`` is required, since ``a`` and
    ``2 - a`` give the same std and ``a > 2`` a negative one.

    Log-probability (``log_prob``):

    - ``"gaussian"`` (default): ``log N(x_next; mean, std**2 I)`` averaged over the non-batch
      elements, the same reduction as :func:`sde_step`'s, so PPO's ratio ``exp(new - old)``
      is a ratio of transition densities, as with the SDE.
    - ``"released"``: the released code's surrogate ``-mean((x_next - mean)**2)``. It is not a
      log-density: the std and the normalising constant are left out. Both policies of a
      ratio share ``std`` (it depends on the sigmas and ``a`` only), so the surrogate's
      log-ratio is exactly ``2 * std**2`` times the Gaussian one: the ratio is the Gaussian
      ratio raised to the power ``2 std**2``, and a fixed clip range ``epsilon`` is
      ``1 / (2 std**2)`` times wider in Gaussian terms. At the paper's step 1 of 10 at 512 px
      with ``a = 0.8`` (``s' = 0.88``) the factor is 1.41; at step 8 (``s' = 0.17``) it is
      0.054, an 18 times wider clip. Kept to reproduce the released runs.

    At the last step (``sigma_next = 0``) the std is 0: the step is deterministic and its
    Gaussian log-probability is NaN (the released surrogate is 0); the trainer's config
    refuses CPS noise at the last step.

    Args:
        x: current latents ``(batch, ...)``.
        v: the model's velocity prediction, same shape as ``x``.
        sigma / sigma_next: current and next noise levels (floats or per-sample tensors),
            ``sigma_next < sigma``.
        noise_level: ``a`` in ``std = sigma_next * sin(a * pi / 2)``, in ``[0, 1]``.
        noise: optional standard normal ``eps``; drawn with ``generator`` when omitted.
        prev_sample: when given, the step is not sampled: ``x_next = prev_sample`` and the
            log-probability is that of ``prev_sample``.
        generator: torch generator for ``noise`` when it is drawn here.
        log_prob: ``"gaussian"`` or ``"released"`` (see above).

    Returns:
        ``(x_next, log_prob, mean, std)`` as :func:`sde_step`: ``log_prob`` has shape
        ``(batch,)``, ``std`` is the transition's standard deviation broadcastable to ``x``;
        computed in float32, ``x_next`` and ``mean`` returned in ``x``'s dtype.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> z0, z1 = torch.randn(2, 4096, 1, generator=g), torch.randn(2, 4096, 1, generator=g)
        >>> x = 0.4 * z0 + 0.6 * z1                     # the flow at sigma = 0.6
        >>> x_next, lp, mean, std = cps_step(x, z1 - z0, 0.6, 0.3, 0.8, generator=g)
        >>> noise = x_next - 0.7 * z0                   # (1 - 0.3) z0 + noise of variance 0.3**2
        >>> round(float(noise.std()), 1)
        0.3
    """
    if not 0 <= noise_level <= 1:
        raise InputError(
            f"CPS noise_level must be in [0, 1] (std = sigma_next * sin(a * pi / 2)); "
            f"got {noise_level}."
        )
    if log_prob not in CPS_LOG_PROBS:
        raise InputError(f"log_prob must be one of {CPS_LOG_PROBS}; got {log_prob!r}.")
    out_dtype = x.dtype
    xf, vf = x.float(), v.float()
    sigma_t = _as_batch_tensor(sigma, xf)
    sigma_next_t = _as_batch_tensor(sigma_next, xf)
    std = sigma_next_t * math.sin(noise_level * math.pi / 2)
    x0 = xf - sigma_t * vf
    x1 = xf + (1 - sigma_t) * vf
    # clamp: sin(a pi / 2) <= 1 keeps the difference >= 0; rounding must not make it a NaN
    mean = (1 - sigma_next_t) * x0 + torch.sqrt((sigma_next_t**2 - std**2).clamp(min=0)) * x1
    if prev_sample is not None:
        x_next = prev_sample.float()
    else:
        if noise is None:
            noise = torch.randn(xf.shape, generator=generator, device=xf.device, dtype=xf.dtype)
        # rounded to x's dtype first, as in sde_step: the stored sample is what is scored
        x_next = (mean + std * noise.float()).to(out_dtype).float()
    dims = tuple(range(1, xf.ndim))
    squared = (x_next.detach() - mean) ** 2
    if log_prob == "released":
        lp = -squared.mean(dim=dims)
    else:
        lp = (-squared / (2 * std**2) - torch.log(std) - 0.5 * math.log(2 * math.pi)).mean(dim=dims)
        degenerate = (std == 0).reshape(std.shape[0], -1)[:, 0]  # a = 0 or sigma_next = 0
        lp = torch.where(degenerate, torch.full_like(lp, math.nan), lp)
    return x_next.to(out_dtype), lp, mean.to(out_dtype), std
