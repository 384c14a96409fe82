"""The CPS step against the released PaCo-GRPO one, restated; the Gaussian option against
``torch.distributions.Normal``; the coefficient-preserving property.

Source: ``PaCo-GRPO/paco_grpo/diffusers_patch/sde_denoising_step.py``,
``denoising_sde_step_with_logprob(..., cps=True)`` (the ``# FlowCPS`` branch), commit
08caac6f22c174e2c71019d2a4481abf9ad313d2 of github.com/X-GenGroup/PaCo-RL.
"""

from __future__ import annotations

import math

import pytest
import torch
from diffusers.utils.torch_utils import randn_tensor

from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.sde import cps_step


def _column(value, like: torch.Tensor) -> torch.Tensor:
    """A scalar or per-sample value as ``(batch, 1, ..., 1)`` in ``like``'s dtype."""
    t = torch.as_tensor(value, dtype=like.dtype).reshape(-1)
    t = t.expand(like.shape[0]) if t.numel() == 1 else t
    return t.reshape(-1, *([1] * (like.ndim - 1)))


def released_cps(model_output, sigma, sigma_prev, sample, noise_level, prev_sample=None,
                 generator=None):  # fmt: skip
    """The released ``cps=True`` branch; ``sigma_prev`` is the next (smaller) sigma.

    Everything in float32; ``std_dev_t`` is the transition's std; the log-probability is
    ``-(prev_sample - mean)**2`` averaged over all but the batch dim. Returns
    ``(prev_sample, log_prob, prev_sample_mean, std_dev_t)``."""
    model_output, sample = model_output.float(), sample.float()
    if prev_sample is not None:
        prev_sample = prev_sample.float()
    a = _column(noise_level, sample)
    sigma, sigma_prev = _column(sigma, sample), _column(sigma_prev, sample)
    std_dev_t = sigma_prev * torch.sin(a * torch.pi / 2)
    x0_hat = sample - sigma * model_output
    x1_hat = sample + model_output * (1 - sigma)
    mean = x0_hat * (1 - sigma_prev) + x1_hat * torch.sqrt(sigma_prev**2 - std_dev_t**2)
    if prev_sample is None:
        eps = randn_tensor(model_output.shape, generator=generator, device=model_output.device,
                           dtype=model_output.dtype)  # fmt: skip
        prev_sample = mean + std_dev_t * eps
    log_prob = -((prev_sample.detach() - mean) ** 2)
    log_prob = log_prob.mean(dim=tuple(range(1, log_prob.ndim)))
    return prev_sample, log_prob, mean, std_dev_t


CASES = [
    # (shape, sigma, sigma_next, noise_level)
    ((2, 16, 8), 1.0, 0.93, 0.8),  # the first step (sigma = 1: no special case in CPS)
    ((3, 64, 16), 0.94, 0.88, 0.8),  # the paper's step 1 of 10 at 512 px
    ((1, 4, 4, 4), 0.35, 0.2, 1.0),  # a = 1: all of the predicted noise is redrawn
    ((2, 8, 4), 0.6, 0.45, 0.3),
    ((4, 32, 4), torch.tensor([0.9, 0.6, 0.5, 0.3]), torch.tensor([0.8, 0.5, 0.3, 0.1]), 0.7),
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("shape", "sigma", "sigma_next", "a"), CASES)
def test_released_option_equals_the_released_step(seed, shape, sigma, sigma_next, a):
    g = torch.Generator().manual_seed(seed)
    x, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    ref = released_cps(v, sigma, sigma_next, x, a, generator=torch.Generator().manual_seed(99))
    x_next, log_prob, mean, std = cps_step(
        x, v, sigma, sigma_next, a, generator=torch.Generator().manual_seed(99), log_prob="released"
    )
    torch.testing.assert_close(x_next, ref[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(log_prob, ref[1], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(mean, ref[2], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(std.expand_as(x), ref[3].expand_as(x), rtol=1e-6, atol=1e-7)
    # re-scoring a recorded transition through the scheduler (the trainer's path)
    recorded = x + 0.1 * torch.randn(shape, generator=g)
    ref = released_cps(v, sigma, sigma_next, x, a, prev_sample=recorded)
    out = FlowGRPOScheduler(a, sde_type="cps", cps_log_prob="released").step(
        v, sigma, sigma_next, x, sigma_max=0.9, prev_sample=recorded
    )
    assert torch.equal(out.prev_sample, recorded)
    torch.testing.assert_close(out.log_prob, ref[1], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out.prev_sample_mean, ref[2], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("shape", "sigma", "sigma_next", "a"), CASES)
def test_gaussian_option_is_the_normal_log_density(shape, sigma, sigma_next, a):
    g = torch.Generator().manual_seed(5)
    x, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    x_next, log_prob, mean, std = cps_step(x, v, sigma, sigma_next, a, generator=g)
    ref_mean = released_cps(v, sigma, sigma_next, x, a, prev_sample=x_next)[2]
    scale = (_column(sigma_next, x) * math.sin(a * math.pi / 2)).double()
    expected = torch.distributions.Normal(ref_mean.double(), scale).log_prob(x_next.double())
    expected = expected.mean(dim=tuple(range(1, x.ndim)))
    torch.testing.assert_close(log_prob.double(), expected, rtol=1e-5, atol=1e-5)
    # the released surrogate is the same quadratic without the 1 / (2 std^2) and log terms:
    # log-ratios of two means differ by exactly the factor 2 std^2
    other = mean + 0.05 * torch.randn(shape, generator=g)
    gauss = torch.distributions.Normal(other.double(), scale).log_prob(x_next.double())
    gauss_ratio = gauss.mean(dim=tuple(range(1, x.ndim))) - expected
    released_ratio = -((x_next - other) ** 2 - (x_next - mean) ** 2).double()
    released_ratio = released_ratio.mean(dim=tuple(range(1, x.ndim)))
    factor = (2 * scale**2).reshape(-1)
    torch.testing.assert_close(released_ratio, factor * gauss_ratio, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(("sigma", "sigma_next", "a"), [(1.0, 0.93, 0.8), (0.6, 0.3, 0.5),
                                                         (0.35, 0.2, 1.0)])  # fmt: skip
def test_coefficients_are_preserved_for_the_exact_velocity(sigma, sigma_next, a):
    """x = (1 - s) z0 + s z1 and v = z1 - z0 give x' = (1 - s') z0 + c z1 + std eps with
    c^2 + std^2 = s'^2: the clean coefficient is 1 - s' and the noise variance s'^2."""
    g = torch.Generator().manual_seed(0)
    z0, z1, eps = (torch.randn(4, 64, 256, generator=g, dtype=torch.float64) for _ in range(3))
    x = (1 - sigma) * z0 + sigma * z1
    x_next, _, _, std = cps_step(x.float(), (z1 - z0).float(), sigma, sigma_next, a,
                                 noise=eps.float())  # fmt: skip
    std = float(std.flatten()[0])
    c = math.sqrt(max(sigma_next**2 - std**2, 0.0))
    assert std == pytest.approx(sigma_next * math.sin(a * math.pi / 2), rel=1e-6)
    expected = (1 - sigma_next) * z0 + c * z1 + std * eps
    torch.testing.assert_close(x_next.double(), expected, rtol=0, atol=2e-6)
    # measured over the draw: regressing x' on z0 gives 1 - s'; the rest has variance s'^2
    coeff = float((x_next.double() * z0).sum() / (z0 * z0).sum())
    assert coeff == pytest.approx(1 - sigma_next, abs=0.01)
    rest = x_next.double() - (1 - sigma_next) * z0
    assert float(rest.var()) == pytest.approx(sigma_next**2, rel=0.02)
