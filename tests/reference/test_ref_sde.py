"""The Flow-GRPO SDE step against the released PaCo-GRPO one, restated.

Source: ``PaCo-GRPO/paco_grpo/diffusers_patch/sde_denoising_step.py``,
``denoising_sde_step_with_logprob`` (the non-CPS branch; github.com/X-GenGroup/PaCo-RL).
"""

from __future__ import annotations

import math

import pytest
import torch
from diffusers.utils.torch_utils import randn_tensor

from paco_grpo.sde import sde_step


def _per_sample(value, like: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=like.dtype)
    return t.view(-1, *([1] * (like.ndim - 1))) if t.ndim else t


def released_sde_step(model_output, sigma, sigma_prev, sample, noise_level, prev_sample=None,
                      generator=None, sigma_max=0.98):  # fmt: skip
    """``denoising_sde_step_with_logprob(..., cps=False)``: returns
    ``(prev_sample, log_prob, prev_sample_mean, std_dev_t)``."""
    model_output, sample = model_output.float(), sample.float()
    if prev_sample is not None:
        prev_sample = prev_sample.float()
    noise_level = _per_sample(noise_level, sample)
    sigma = _per_sample(sigma, sample)
    sigma_prev = _per_sample(sigma_prev, sample)
    dt = sigma_prev - sigma
    sigma_max = _per_sample(sigma_max, sample)
    std_dev_t = torch.sqrt(sigma / (1 - torch.where(sigma == 1, sigma_max, sigma))) * noise_level
    prev_sample_mean = (
        sample * (1 + std_dev_t**2 / (2 * sigma) * dt)
        + model_output * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
    )
    if prev_sample is None:
        variance_noise = randn_tensor(
            model_output.shape, generator=generator, device=model_output.device,
            dtype=model_output.dtype,
        )  # fmt: skip
        prev_sample = prev_sample_mean + std_dev_t * torch.sqrt(-1 * dt) * variance_noise
    log_prob = (
        -((prev_sample.detach() - prev_sample_mean) ** 2) / (2 * ((std_dev_t * torch.sqrt(-1 * dt)) ** 2))
        - torch.log(std_dev_t * torch.sqrt(-1 * dt))
        - torch.log(torch.sqrt(2 * torch.as_tensor(math.pi)))
    )  # fmt: skip
    log_prob = log_prob.mean(dim=tuple(range(1, log_prob.ndim)))
    return prev_sample, log_prob, prev_sample_mean, std_dev_t


CASES = [
    # (shape, sigma, sigma_next, noise_level, sigma_max)
    ((2, 16, 8), 1.0, 0.93, 0.7, 0.96),  # first step: sigma == 1 uses sigma_max
    ((3, 64, 16), 0.8, 0.7, 0.9, 0.96),
    ((1, 4, 4, 4), 0.35, 0.2, 1.0, 0.9),
    ((4, 32, 4), torch.tensor([0.9, 0.6, 0.5, 0.3]), torch.tensor([0.8, 0.5, 0.3, 0.1]), 0.5, 0.98),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("shape", "sigma", "sigma_next", "a", "sigma_max"), CASES)
def test_sampled_step_equals_released(seed, shape, sigma, sigma_next, a, sigma_max):
    g = torch.Generator().manual_seed(seed)
    x, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    ref = released_sde_step(v, sigma, sigma_next, x, a, generator=torch.Generator().manual_seed(99),
                            sigma_max=sigma_max)  # fmt: skip
    ours = sde_step(
        x, v, sigma, sigma_next, a, sigma_max, generator=torch.Generator().manual_seed(99)
    )
    x_next, log_prob, mean, std = ours
    torch.testing.assert_close(x_next, ref[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(log_prob, ref[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean, ref[2], rtol=1e-6, atol=1e-6)
    dt = _per_sample(sigma_next, x) - _per_sample(sigma, x)
    torch.testing.assert_close(
        std.expand_as(ref[3].expand_as(x)), (ref[3] * torch.sqrt(-dt)).expand_as(x)
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("shape", "sigma", "sigma_next", "a", "sigma_max"), CASES)
def test_log_prob_of_a_recorded_sample_equals_released(
    seed, shape, sigma, sigma_next, a, sigma_max
):
    g = torch.Generator().manual_seed(seed)
    x, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    recorded = x + 0.1 * torch.randn(shape, generator=g)
    ref = released_sde_step(v, sigma, sigma_next, x, a, prev_sample=recorded, sigma_max=sigma_max)
    _, log_prob, _, _ = sde_step(x, v, sigma, sigma_next, a, sigma_max, prev_sample=recorded)
    torch.testing.assert_close(log_prob, ref[1], rtol=1e-5, atol=1e-5)
