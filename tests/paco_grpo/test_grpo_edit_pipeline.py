"""Editing samplers on tiny Kontext / Qwen-Image-Edit pipelines: a = 0 equals diffusers, SDE
and CPS transitions are recorded and re-scorable, references are resized preserving aspect ratio."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import FluxKontextPipeline, QwenImageEditPipeline
from PIL import Image

from paco_grpo.data import PromptItem
from paco_grpo.pipelines import (
    KontextGRPOSampler,
    QwenImageEditGRPOSampler,
    area_preserving_size,
    prepare_edit_items,
    resize_to_area,
)
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.testing.flux_kontext import build_tiny_flux_kontext
from paco_grpo.testing.qwen_image_edit import build_tiny_qwen_image_edit
from paco_reward.errors import InputError, PromptError
from paco_reward.images import image_hash


def _image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def kontext(tmp_path_factory):
    path = build_tiny_flux_kontext(tmp_path_factory.mktemp("kontext") / "k", seed=0)
    pipe = FluxKontextPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    return path, pipe


# ---------------------------------------------------------------- reference resizing
@pytest.mark.parametrize(
    "size, area, multiple",
    [((1600, 900), 384 * 384, 16), ((900, 1600), 384 * 384, 16), ((640, 480), 1024**2, 16),
     ((333, 1000), 512 * 512, 32), ((2000, 2000), 384 * 384, 16)],
)  # fmt: skip
def test_area_preserving_size_keeps_aspect_ratio_and_area(size, area, multiple):
    w, h = area_preserving_size(*size, area, multiple)
    assert w % multiple == 0 and h % multiple == 0
    # each side within half a multiple of the exact aspect-preserving side
    exact_w, exact_h = (area * size[0] / size[1]) ** 0.5, (area * size[1] / size[0]) ** 0.5
    assert abs(w - exact_w) <= multiple / 2 and abs(h - exact_h) <= multiple / 2
    assert abs(w * h / area - 1) < 0.1
    assert abs((w / h) / (size[0] / size[1]) - 1) < 0.1


def test_area_preserving_size_examples_and_validation():
    assert area_preserving_size(1600, 900, 384 * 384, 16) == (512, 288)
    assert area_preserving_size(1024, 1024, 384 * 384, 16) == (384, 384)
    assert area_preserving_size(4000, 10, 32 * 32, 16) == (640, 16)  # never below one multiple
    with pytest.raises(InputError, match="must be >= 1; got 0, 10"):
        area_preserving_size(0, 10, 100, 16)


def test_resize_to_area_returns_resized_pil():
    wide = resize_to_area(_image(200, 100), 32 * 32)
    assert wide.size == (48, 16) and wide.mode == "RGB"
    same = _image(64, 32)
    assert resize_to_area(same, 64 * 32, 16) is not same or same.size == (64, 32)
    assert resize_to_area(np.zeros((40, 40, 3), dtype=np.uint8), 32 * 32).size == (32, 32)


def test_prepare_edit_items_resizes_and_hashes_the_original():
    source = _image(120, 60)
    items = prepare_edit_items(
        [PromptItem("0", "make it red", metadata={"source_image": source, "other": 1})], 32 * 32
    )
    meta = items[0].metadata
    assert meta["source_image"].size == (48, 16) and meta["other"] == 1
    assert meta["source_image_hash"] == image_hash(source)
    with pytest.raises(PromptError, match="'7' has no metadata\\['source_image'\\]"):
        prepare_edit_items([PromptItem("7", "x")], 32 * 32)


# ---------------------------------------------------------------- Kontext
def test_tiny_kontext_round_trips_through_from_pretrained(kontext, tmp_path):
    _, pipe = kontext
    other = FluxKontextPipeline.from_pretrained(build_tiny_flux_kontext(tmp_path / "k", seed=0))
    for a, b in zip(
        pipe.transformer.state_dict().values(), other.transformer.state_dict().values()
    ):
        assert torch.equal(a, b)
    assert pipe.transformer.config.guidance_embeds and pipe.vae_scale_factor == 8


@pytest.mark.parametrize("noise_steps", [[], [1, 2]])
def test_kontext_noise_level_zero_equals_flux_kontext_pipeline(kontext, noise_steps):
    _, pipe = kontext
    reference = _image(80, 48)
    expected = pipe(
        image=reference,
        prompt="make the sky pink",
        height=48,
        width=80,
        num_inference_steps=4,
        guidance_scale=2.5,
        num_images_per_prompt=2,
        generator=torch.Generator().manual_seed(7),
        output_type="pt",
        max_sequence_length=32,
        max_area=48 * 80,
        _auto_resize=False,
    ).images
    sampler = KontextGRPOSampler(pipe, max_sequence_length=32)
    ours = sampler(
        ["make the sky pink"] * 2,
        [reference] * 2,
        num_steps=4,
        guidance_scale=2.5,
        noise_level=0.0,
        noise_steps=noise_steps,
        generator=torch.Generator().manual_seed(7),
    )
    assert ours.images.shape == expected.shape == (2, 3, 48, 80)
    assert torch.equal(ours.images, expected)
    torch.testing.assert_close(ours.schedule.timesteps, pipe.scheduler.timesteps, rtol=0, atol=0)


@pytest.mark.parametrize("sde_type", ["sde", "cps"])
def test_kontext_sde_steps_are_recorded_and_rescorable(kontext, sde_type):
    _, pipe = kontext
    sampler = KontextGRPOSampler(pipe, max_sequence_length=32)
    scheduler = FlowGRPOScheduler(0.9, sde_type=sde_type)
    prompts = ["make it red", "make it blue"]
    refs = [_image(200, 100, seed=1), _image(100, 50, seed=2)]
    out = sampler(
        prompts,
        refs,
        area=32 * 32,
        num_steps=4,
        noise_level=0.9,
        noise_steps=[0, 2],
        generator=torch.Generator().manual_seed(0),
        scheduler=scheduler,
    )
    assert out.images.shape == (2, 3, 16, 48)  # 2:1 references at 32^2 px area
    assert out.noise_latents.shape == (2, 2, 3, 16) and torch.isfinite(out.log_probs).all()
    resized = [resize_to_area(r, 32 * 32) for r in refs]
    cond = sampler.condition(prompts, resized, 16, 48)
    assert cond.image_latents.shape == (2, 3, 16)  # reference tokens appended
    for j, step in enumerate(out.noise_steps):
        x = out.noise_latents[:, j]
        v = sampler.velocity(pipe.transformer, x, out.schedule.timesteps[step], cond, 2.5)
        again = scheduler.step(
            v,
            out.schedule.sigmas[step],
            out.schedule.sigmas[step + 1],
            x,
            sigma_max=out.schedule.sigma_max,
            prev_sample=out.noise_next_latents[:, j],
        )
        torch.testing.assert_close(again.log_prob, out.log_probs[:, j], rtol=1e-5, atol=1e-5)
    # the reference image conditions the edit: same seed, other references -> other images
    other = sampler(
        prompts,
        [_image(200, 100, seed=3), _image(100, 50, seed=4)],
        area=32 * 32,
        num_steps=4,
        noise_level=0.9,
        noise_steps=[0, 2],
        generator=torch.Generator().manual_seed(0),
        scheduler=scheduler,
    )
    assert not torch.allclose(other.images, out.images)
    assert len(sampler._image_cache) == 4 and len(sampler.flux._cache) == 2


def test_edit_sampler_input_validation(kontext):
    _, pipe = kontext
    sampler = KontextGRPOSampler(pipe, max_sequence_length=32)
    square, wide = _image(32, 32), _image(64, 32)
    with pytest.raises(InputError, match="Got 2 prompts but 1 reference images"):
        sampler(["a", "b"], [square], num_steps=2)
    with pytest.raises(InputError, match="resize to different sizes"):
        sampler(["a", "b"], [square, wide], area=32 * 32, num_steps=2)
    with pytest.raises(InputError, match=r"noise_steps \[3\] must lie in \[0, 1\]"):
        sampler(["a"], [square], num_steps=2, noise_steps=[3])
    with pytest.raises(InputError, match="multiples of 16; got 40x32"):
        sampler(["a"], [square], height=40, num_steps=2)


# ---------------------------------------------------------------- Qwen-Image-Edit
@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    path = build_tiny_qwen_image_edit(tmp_path_factory.mktemp("qwen") / "q", seed=0)
    pipe = QwenImageEditPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_qwen_image_edit_noise_level_zero_equals_diffusers_with_true_cfg(qwen):
    pipe = qwen
    assert type(pipe.processor).__name__ == "Qwen2VLProcessor" and pipe.vae_scale_factor == 32
    reference = _image(64, 64)
    # diffusers always resizes the reference to 1024^2 px area; the output size is free
    expected = pipe(
        image=reference,
        prompt="make it red",
        negative_prompt=" ",
        true_cfg_scale=4.0,
        height=128,
        width=128,
        num_inference_steps=3,
        num_images_per_prompt=2,
        generator=torch.Generator().manual_seed(3),
        output_type="pt",
    ).images
    sampler = QwenImageEditGRPOSampler(pipe, negative_prompt=" ")
    ours = sampler(
        ["make it red"] * 2,
        [reference] * 2,
        area=1024 * 1024,
        height=128,
        width=128,
        num_steps=3,
        guidance_scale=4.0,
        noise_level=0.0,
        noise_steps=[],
        generator=torch.Generator().manual_seed(3),
    )
    assert ours.images.shape == expected.shape == (2, 3, 128, 128)
    assert torch.equal(ours.images, expected)


@pytest.mark.parametrize("sde_type", ["sde", "cps"])
def test_qwen_image_edit_noise_steps_rescore_to_the_recorded_log_probs(qwen, sde_type):
    """SDE / CPS transitions re-score to the recorded log-probs (CFG included)."""
    pipe = qwen
    sampler = QwenImageEditGRPOSampler(pipe, negative_prompt=" ")
    scheduler = FlowGRPOScheduler(1.0, sde_type=sde_type)
    out = sampler(
        ["make it red", "make it blue"],
        [_image(64, 64, 1), _image(64, 64, 2)],
        area=64 * 64,
        num_steps=3,
        guidance_scale=4.0,
        noise_level=1.0,
        noise_steps=[1],
        generator=torch.Generator().manual_seed(0),
        scheduler=scheduler,
    )
    assert torch.isfinite(out.log_probs).all()
    refs = [resize_to_area(_image(64, 64, s), 64 * 64, 64) for s in (1, 2)]
    cond = sampler.condition(["make it red", "make it blue"], refs, 64, 64)
    x = out.noise_latents[:, 0]
    v = sampler.velocity(pipe.transformer, x, out.schedule.timesteps[1], cond, 4.0)
    again = scheduler.step(
        v,
        out.schedule.sigmas[1],
        out.schedule.sigmas[2],
        x,
        sigma_max=out.schedule.sigma_max,
        prev_sample=out.noise_next_latents[:, 0],
    )
    torch.testing.assert_close(again.log_prob, out.log_probs[:, 0], rtol=1e-5, atol=1e-5)
