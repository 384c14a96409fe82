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
    with pytest.raises(ValueError, match="multiples of 16; got 60x64"):
        sampler(["a"], height=60, width=64, num_steps=2)
    with pytest.raises(ValueError, match=r"noise_steps \[5\] must lie in \[0, 1\]"):
        sampler(["a"], height=64, width=64, num_steps=2, noise_steps=[5])
    with pytest.raises(ValueError, match="output_type must be 'pt' or 'latent'"):
        sampler(["a"], height=64, width=64, num_steps=2, output_type="pil")
