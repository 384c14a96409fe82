"""sde_step against its closed form; a = 0 is diffusers' Euler step; FLUX's shifted schedule;
SD3.5's static shift;
cps_step's edge cases and the scheduler's dispatch (its formula: tests/reference/test_ref_cps.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from scipy.stats import norm

from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.sde import cps_step, sde_step
from paco_grpo.timesteps import flux_schedule, image_seq_len, sd3_schedule
from paco_reward.errors import InputError


def _closed_form(x, v, sigma, sigma_next, a, sigma_max, eps):
    x, v, eps = (np.asarray(t, dtype=np.float64) for t in (x, v, eps))
    dt = sigma_next - sigma
    s = sigma_max if sigma == 1 else sigma
    std_t = a * math.sqrt(sigma / (1 - s))
    mean = (
        x * (1 + std_t**2 * dt / (2 * sigma)) + v * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
    )
    std = std_t * math.sqrt(-dt)
    x_next = mean + std * eps
    log_prob = norm.logpdf(x_next, loc=mean, scale=std).reshape(len(x), -1).mean(axis=1)
    return x_next, log_prob, mean, std


@pytest.mark.parametrize("sigma,sigma_next", [(1.0, 0.93), (0.7, 0.55), (0.2, 0.0)])
def test_sde_step_matches_closed_form(sigma, sigma_next):
    gen = torch.Generator().manual_seed(0)
    x, v, eps = (torch.randn(3, 8, 4, generator=gen) for _ in range(3))
    x_next, log_prob, mean, std = sde_step(x, v, sigma, sigma_next, 0.7, 0.93, noise=eps)
    ref = _closed_form(x, v, sigma, sigma_next, 0.7, 0.93, eps)
    np.testing.assert_allclose(x_next.numpy(), ref[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_prob.numpy(), ref[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean.numpy(), ref[2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(std.flatten()[0]), ref[3], rtol=1e-6)


def test_prev_sample_is_scored_not_resampled():
    gen = torch.Generator().manual_seed(1)
    x, v, target = (torch.randn(2, 5, 3, generator=gen) for _ in range(3))
    out, log_prob, mean, std = sde_step(x, v, 0.8, 0.6, 0.7, 0.9, prev_sample=target)
    assert torch.equal(out, target)
    expected = norm.logpdf(target.double().numpy(), mean.double().numpy(), float(std.flatten()[0]))
    np.testing.assert_allclose(log_prob.numpy(), expected.reshape(2, -1).mean(1), rtol=1e-5)
    # the sampled step's own log-prob is higher than a far-away sample's
    _, lp_far, _, _ = sde_step(x, v, 0.8, 0.6, 0.7, 0.9, prev_sample=mean + 10 * std)
    assert (log_prob > lp_far).all()


def test_per_sample_sigmas_broadcast():
    x, v = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    eps = torch.randn(2, 4, 3)
    batched = sde_step(
        x, v, torch.tensor([0.8, 0.5]), torch.tensor([0.6, 0.3]), 0.7, 0.9, noise=eps
    )
    one = sde_step(x[1:], v[1:], 0.5, 0.3, 0.7, 0.9, noise=eps[1:])
    torch.testing.assert_close(batched[0][1:], one[0])
    torch.testing.assert_close(batched[1][1:], one[1])


def test_noise_level_zero_is_diffusers_euler_step():
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    schedule = flux_schedule(scheduler, 6, image_seq_len=64)
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / 6, 6), mu=schedule.mu)
    x = torch.randn(2, 16, 8)
    for i, t in enumerate(scheduler.timesteps):
        v = torch.randn(2, 16, 8)
        expected = scheduler.step(v, t, x, return_dict=False)[0]
        ours, log_prob, _, std = sde_step(
            x, v, schedule.sigmas[i], schedule.sigmas[i + 1], 0.0, schedule.sigma_max
        )
        assert torch.equal(ours, expected), i
        assert torch.isnan(log_prob).all() and float(std.max()) == 0.0
        x = expected


def test_negative_noise_level_raises():
    with pytest.raises(InputError, match="noise_level must be >= 0"):
        sde_step(torch.zeros(1, 2), torch.zeros(1, 2), 0.5, 0.4, -0.1, 0.9)


def test_cps_noise_level_zero_is_the_euler_step_and_the_scheduler_takes_euler_exactly():
    gen = torch.Generator().manual_seed(2)
    x, v = torch.randn(2, 16, 8, generator=gen), torch.randn(2, 16, 8, generator=gen)
    euler = sde_step(x, v, 0.7, 0.55, 0.0, 0.9)
    x_next, log_prob, _, std = cps_step(x, v, 0.7, 0.55, 0.0)
    torch.testing.assert_close(x_next, euler[0], rtol=1e-6, atol=1e-6)  # algebraically equal
    assert torch.isnan(log_prob).all() and float(std.max()) == 0.0
    # the scheduler's ODE steps are the same float operations with either step type
    for level in (None, 0.0):
        scheduler = FlowGRPOScheduler(0.0 if level is None else 0.8, sde_type="cps")
        out = scheduler.step(v, 0.7, 0.55, x, sigma_max=0.9, noise_level=level)
        assert torch.equal(out.prev_sample, euler[0])


def test_cps_last_step_is_deterministic():
    """sigma_next = 0: std = 0, the step lands on the predicted clean latents; the Gaussian
    log-probability is NaN (the config refuses CPS noise there), the released surrogate 0."""
    x, v = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    x_next, log_prob, mean, std = cps_step(x, v, 0.2, 0.0, 0.8)
    torch.testing.assert_close(x_next, x - 0.2 * v)
    assert torch.equal(x_next, mean) and float(std.max()) == 0.0 and torch.isnan(log_prob).all()
    released = cps_step(x, v, 0.2, 0.0, 0.8, log_prob="released")[1]
    assert torch.equal(released, torch.zeros(2))
    # per-sample sigmas: only the sample that ends at 0 is degenerate
    _, lp, _, _ = cps_step(x, v, torch.tensor([0.5, 0.2]), torch.tensor([0.3, 0.0]), 0.8)
    assert torch.isfinite(lp[0]) and torch.isnan(lp[1])


def test_scheduler_default_is_the_sde_step():
    gen = torch.Generator().manual_seed(3)
    x, v, eps = (torch.randn(2, 8, 4, generator=gen) for _ in range(3))
    out = FlowGRPOScheduler(0.7).step(v, 0.8, 0.6, x, sigma_max=0.9, prev_sample=eps)
    expected = sde_step(x, v, 0.8, 0.6, 0.7, 0.9, prev_sample=eps)
    assert torch.equal(out.log_prob, expected[1]) and torch.equal(out.std, expected[3])


def test_cps_validation():
    z = torch.zeros(1, 2)
    with pytest.raises(InputError, match=r"CPS noise_level must be in \[0, 1\].*got 1.5"):
        cps_step(z, z, 0.5, 0.4, 1.5)
    with pytest.raises(InputError, match=r"log_prob must be one of \('gaussian', 'released'\)"):
        cps_step(z, z, 0.5, 0.4, 0.8, log_prob="mse")
    with pytest.raises(InputError, match=r"sde_type must be one of \('sde', 'cps'\); got 'ode'"):
        FlowGRPOScheduler(0.7, sde_type="ode")
    with pytest.raises(InputError, match="cps_log_prob must be one of"):
        FlowGRPOScheduler(0.7, sde_type="cps", cps_log_prob="mse")
    with pytest.raises(InputError, match=r"noise_level must be in \[0, 1\] for CPS; got 1.2"):
        FlowGRPOScheduler(1.2, sde_type="cps")


@pytest.mark.parametrize("height,width", [(512, 512), (1024, 1024), (512, 1024)])
def test_schedule_is_resolution_shifted_closed_form(height, width):
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    seq = image_seq_len(height, width, 8)
    schedule = flux_schedule(scheduler, 10, seq)
    mu = 0.5 + (1.15 - 0.5) / (4096 - 256) * (seq - 256)
    t = np.linspace(1.0, 0.1, 10)
    sigmas = np.exp(mu) / (np.exp(mu) + (1 / t - 1))
    np.testing.assert_allclose(schedule.sigmas[:-1].numpy(), sigmas, rtol=1e-6)
    assert float(schedule.sigmas[-1]) == 0.0 and float(schedule.sigmas[0]) == 1.0
    np.testing.assert_allclose(schedule.timesteps.numpy(), sigmas * 1000, rtol=1e-5)
    assert schedule.mu == pytest.approx(mu)


def test_higher_resolution_shifts_sigmas_up():
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    low = flux_schedule(scheduler, 10, image_seq_len(512, 512, 8))
    high = flux_schedule(scheduler, 10, image_seq_len(1024, 1024, 8))
    assert (high.sigmas[1:-1] > low.sigmas[1:-1]).all()


def test_schedule_rejects_zero_steps():
    with pytest.raises(InputError, match="num_steps must be >= 1"):
        flux_schedule(FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True), 0, 64)


def test_sd3_schedule_is_the_static_shift_closed_form_at_any_resolution():
    """SD3.5's scheduler (shift 3, no dynamic shifting): the scheduler's own sigmas, from 1 to
    its shifted sigma_min, shifted by 3; the same at every resolution; mu = log(3)."""
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)

    def shift(s):
        return 3 * s / (1 + 2 * s)

    t = np.linspace(1.0, shift(1 / 1000), 10)
    for seq in (1024, 4096):
        schedule = sd3_schedule(scheduler, 10, seq)
        np.testing.assert_allclose(schedule.sigmas[:-1].numpy(), shift(t), rtol=1e-6)
        assert float(schedule.sigmas[-1]) == 0.0
        np.testing.assert_allclose(schedule.timesteps.numpy(), shift(t) * 1000, rtol=1e-5)
        assert schedule.mu == pytest.approx(math.log(3.0))
    # with dynamic shifting it follows the resolution as the pipeline does
    dynamic = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, max_shift=1.2)
    assert sd3_schedule(dynamic, 10, 4096).mu == pytest.approx(1.2)
    assert sd3_schedule(dynamic, 10, 256).mu == pytest.approx(0.5)
    with pytest.raises(InputError, match="num_steps must be >= 1"):
        sd3_schedule(scheduler, 0, 64)
