"""Sampling on the tiny FLUX: a = 0 equals diffusers' FluxPipeline; SDE / CPS steps are
recorded and re-score to their recorded log-probabilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import FluxPipeline

from paco_grpo.pipelines import FlowGRPOSampler
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.testing.flux import build_tiny_flux
from paco_grpo.timesteps import flux_schedule
from paco_reward.errors import InputError

PROMPTS = ["a red fox in a 2x2 grid", "a blue bird"]


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    path = build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)
    pipe = FluxPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_tiny_flux_round_trips_through_from_pretrained(pipe, tmp_path):
    path = build_tiny_flux(tmp_path / "again", seed=0)
    other = FluxPipeline.from_pretrained(path)
    for a, b in zip(
        pipe.transformer.state_dict().values(), other.transformer.state_dict().values()
    ):
        assert torch.equal(a, b)
    assert pipe.vae_scale_factor == 8 and pipe.transformer.config.guidance_embeds


@pytest.mark.parametrize("noise_steps", [[], [1, 2]])
def test_noise_level_zero_equals_flux_pipeline(pipe, noise_steps):
    expected = pipe(
        PROMPTS,
        height=64,
        width=96,
        num_inference_steps=4,
        guidance_scale=3.5,
        num_images_per_prompt=2,
        generator=torch.Generator().manual_seed(7),
        output_type="pt",
        max_sequence_length=32,
    ).images
    sampler = FlowGRPOSampler(pipe, max_sequence_length=32)
    ours = sampler(
        [p for p in PROMPTS for _ in range(2)],
        height=64,
        width=96,
        num_steps=4,
        guidance_scale=3.5,
        noise_level=0.0,
        noise_steps=noise_steps,
        generator=torch.Generator().manual_seed(7),
    )
    assert ours.images.shape == expected.shape == (4, 3, 64, 96)
    assert torch.equal(ours.images, expected)
    # and the timesteps are the ones the pipeline's scheduler used
    torch.testing.assert_close(ours.schedule.timesteps, pipe.scheduler.timesteps, rtol=0, atol=0)
    torch.testing.assert_close(ours.schedule.sigmas, pipe.scheduler.sigmas, rtol=0, atol=0)


def test_schedule_equals_flux_pipeline_at_two_resolutions(pipe):
    for size in (64, 256):
        pipe(
            "x",
            height=size,
            width=size,
            num_inference_steps=5,
            output_type="latent",
            max_sequence_length=32,
            generator=torch.Generator().manual_seed(0),
        )
        seq = (size // 16) ** 2
        ours = flux_schedule(pipe.scheduler, 5, seq)
        assert torch.equal(ours.timesteps, pipe.scheduler.timesteps)
        assert torch.equal(ours.sigmas, pipe.scheduler.sigmas)


@pytest.mark.parametrize(
    ("sde_type", "cps_log_prob"), [("sde", "gaussian"), ("cps", "gaussian"), ("cps", "released")]
)
def test_sde_steps_are_recorded_and_rescorable(pipe, sde_type, cps_log_prob):
    sampler = FlowGRPOSampler(pipe, max_sequence_length=32)
    scheduler = FlowGRPOScheduler(0.7, sde_type=sde_type, cps_log_prob=cps_log_prob)
    kwargs = {"height": 64, "width": 64, "num_steps": 4, "noise_level": 0.7,
              "noise_steps": [0, 2], "scheduler": scheduler}  # fmt: skip
    out = sampler(PROMPTS, generator=torch.Generator().manual_seed(0), **kwargs)
    assert out.noise_latents.shape == out.noise_next_latents.shape == (2, 2, 16, 16)
    assert out.log_probs.shape == (2, 2) and torch.isfinite(out.log_probs).all()
    # re-evaluating the recorded transition with the same model gives the same log-prob
    # (the trainer's first ratio is 1)
    cond = sampler.encode_prompts(PROMPTS)
    img_ids = sampler.latent_ids(64, 64, "cpu", cond.prompt_embeds.dtype)
    for j, step in enumerate(out.noise_steps):
        x = out.noise_latents[:, j]
        v = sampler.velocity(pipe.transformer, x, out.schedule.timesteps[step], cond, img_ids, 3.5)
        again = scheduler.step(
            v,
            out.schedule.sigmas[step],
            out.schedule.sigmas[step + 1],
            x,
            sigma_max=out.schedule.sigma_max,
            prev_sample=out.noise_next_latents[:, j],
        )
        torch.testing.assert_close(again.log_prob, out.log_probs[:, j], rtol=1e-5, atol=1e-5)
    if sde_type == "sde":  # the default scheduler is this one
        default = sampler(PROMPTS, generator=torch.Generator().manual_seed(0),
                          **{**kwargs, "scheduler": None})  # fmt: skip
        assert torch.equal(default.log_probs, out.log_probs)
        assert torch.equal(default.images, out.images)
    # different seeds -> different images (the noise matters)
    other = sampler(PROMPTS, generator=torch.Generator().manual_seed(1), **kwargs)
    assert not np.allclose(other.images.numpy(), out.images.numpy())


def test_prompt_encodings_are_cached(pipe):
    sampler = FlowGRPOSampler(pipe, max_sequence_length=32)
    first = sampler.encode_prompts(["a", "b", "a"])
    assert len(sampler._cache) == 2
    torch.testing.assert_close(first.prompt_embeds[0], first.prompt_embeds[2])


def test_sampler_input_validation(pipe):
    sampler = FlowGRPOSampler(pipe, max_sequence_length=32)
    with pytest.raises(InputError, match="multiples of 16; got 60x64"):
        sampler(["a"], height=60, width=64, num_steps=2)
    with pytest.raises(InputError, match=r"noise_steps \[5\] must lie in \[0, 1\]"):
        sampler(["a"], height=64, width=64, num_steps=2, noise_steps=[5])
    with pytest.raises(InputError, match="output_type must be 'pt' or 'latent'"):
        sampler(["a"], height=64, width=64, num_steps=2, output_type="pil")


# ---------------------------------------------------------------- Stable Diffusion 3.5


@pytest.fixture(scope="module")
def sd3_pipe(tmp_path_factory):
    from diffusers import StableDiffusion3Pipeline

    from paco_grpo.testing.sd3 import build_tiny_sd3

    pipe = StableDiffusion3Pipeline.from_pretrained(
        build_tiny_sd3(tmp_path_factory.mktemp("tiny-sd3") / "sd3", seed=0)
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize(("guidance_scale", "noise_steps"), [(4.5, [1, 2]), (1.0, [])])
def test_noise_level_zero_equals_sd3_pipeline(sd3_pipe, guidance_scale, noise_steps):
    """CFG on ([negative; prompt] in one call) and off; one prompt x 3 images, as the
    pipeline's CLIP projections round differently in a batch of other prompts."""
    from paco_grpo.pipelines import SD3GRPOSampler

    prompt = PROMPTS[0]
    expected = sd3_pipe(
        prompt,
        height=64,
        width=96,
        num_inference_steps=4,
        guidance_scale=guidance_scale,
        num_images_per_prompt=3,
        generator=torch.Generator().manual_seed(7),
        output_type="pt",
        max_sequence_length=32,
    ).images
    sampler = SD3GRPOSampler(sd3_pipe, max_sequence_length=32)
    ours = sampler(
        [prompt] * 3,
        height=64,
        width=96,
        num_steps=4,
        guidance_scale=guidance_scale,
        noise_level=0.0,
        noise_steps=noise_steps,
        generator=torch.Generator().manual_seed(7),
    )
    assert ours.images.shape == expected.shape == (3, 3, 64, 96)
    assert torch.equal(ours.images, expected)
    assert ours.noise_latents.shape == (3, len(noise_steps), 16, 8, 12)  # unpacked latents
    assert torch.equal(ours.schedule.timesteps, sd3_pipe.scheduler.timesteps)
    assert torch.equal(ours.schedule.sigmas, sd3_pipe.scheduler.sigmas)


@pytest.mark.parametrize("sde_type", ["sde", "cps"])
def test_sd3_sampled_steps_score_as_the_closed_form_and_rescore(sd3_pipe, sde_type):
    """A recorded SDE step's log-prob is the Gaussian closed form (mean over the 4-D
    latents' elements); a recorded SDE or CPS step re-scores to its recorded log-prob."""
    from scipy.stats import norm

    from paco_grpo.pipelines import SD3GRPOSampler

    sampler = SD3GRPOSampler(sd3_pipe, max_sequence_length=32)
    scheduler = FlowGRPOScheduler(0.7, sde_type=sde_type)
    out = sampler(PROMPTS, height=64, width=64, num_steps=4, guidance_scale=4.5,
                  noise_level=0.7, noise_steps=[0, 2], scheduler=scheduler,
                  generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert out.noise_latents.shape == out.noise_next_latents.shape == (2, 2, 16, 8, 8)
    assert out.log_probs.shape == (2, 2) and torch.isfinite(out.log_probs).all()
    sigma_max = out.schedule.sigma_max
    for j, step in enumerate(out.noise_steps):
        x, x_next = out.noise_latents[:, j], out.noise_next_latents[:, j]
        t = out.schedule.timesteps[step]
        with torch.no_grad():
            v = sampler.transition_velocity(sd3_pipe.transformer, x, t, PROMPTS, 64, 64, 4.5)
        sigma, sigma_next = (float(out.schedule.sigmas[k]) for k in (step, step + 1))
        again = scheduler.step(v, sigma, sigma_next, x, sigma_max=sigma_max, prev_sample=x_next)
        torch.testing.assert_close(again.log_prob, out.log_probs[:, j], rtol=1e-5, atol=1e-5)
        if sde_type == "sde":  # Flow-GRPO's SDE step (eq. 9 of arXiv 2505.05470), by hand
            x64, v64, n64 = x.double().numpy(), v.double().numpy(), x_next.double().numpy()
            dt = sigma_next - sigma
            std_t = 0.7 * np.sqrt(sigma / (1 - (sigma_max if sigma == 1 else sigma)))
            mean = (
                x64 * (1 + std_t**2 * dt / (2 * sigma))
                + v64 * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
            )
            closed = norm.logpdf(n64, mean, std_t * np.sqrt(-dt)).reshape(2, -1).mean(axis=1)
            np.testing.assert_allclose(out.log_probs[:, j].numpy(), closed, rtol=1e-4, atol=1e-4)


def test_sd3_sampler_caches_prompts_and_checks_sizes(sd3_pipe):
    from paco_grpo.pipelines import SD3GRPOSampler, get_pipeline_spec

    sampler = SD3GRPOSampler(sd3_pipe, max_sequence_length=32)
    assert sampler.size_multiple == 16
    first = sampler.encode_prompts(["a", "b", "a"])
    assert len(sampler._cache) == 2
    assert first.prompt_embeds.shape == (3, 77 + 32, 48)  # CLIP-L | CLIP-G padded, then T5
    assert first.pooled_prompt_embeds.shape == (3, 32)
    with pytest.raises(InputError, match="multiples of 16; got 56x64"):
        sampler(["a"], height=56, width=64, num_steps=2)
    spec = get_pipeline_spec("sd3")
    assert (spec.diffusers_class, spec.true_cfg, spec.edits) == (
        "StableDiffusion3Pipeline",
        True,
        False,
    )
