"""paco_grpo.pipelines, every registered generator alike: the registry, a recorded SDE step's
log-probability against the closed form, one GRPO step and a resume on the tiny model, LoRA
targets on the real architecture; and Qwen-Image's sampler against diffusers'
``QwenImagePipeline`` (FLUX's, Kontext's and Qwen-Image-Edit's are in test_grpo_pipeline.py
and test_grpo_edit_pipeline.py).

A new model adds its tiny builder and tiny CPU recipe to ``TINY`` and its real-size recipe
to ``recipes/``; these tests then cover it."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from pathlib import Path

import diffusers
import numpy as np
import pytest
import torch
from scipy.stats import norm

from paco_grpo.architectures import pipeline_configs
from paco_grpo.data import load_prompts
from paco_grpo.grpo_config import EDIT_PIPELINES, PIPELINES, GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.pipelines import (
    PIPELINE_SPECS,
    GRPOSampler,
    PipelineSpec,
    get_pipeline_spec,
    register_pipeline,
)
from paco_grpo.policy import build_sampler, edit_items, load_pipeline
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.testing.flux import build_tiny_flux
from paco_grpo.testing.flux2 import build_tiny_flux2, build_tiny_flux2_klein
from paco_grpo.testing.flux_kontext import build_tiny_flux_kontext
from paco_grpo.testing.qwen_image import build_tiny_qwen_image
from paco_grpo.testing.qwen_image_edit import build_tiny_qwen_image_edit
from paco_grpo.testing.sd3 import build_tiny_sd3
from paco_reward.architectures import build_empty
from paco_reward.errors import ConfigError, InputError, PathNotFoundError

# pipeline -> (tiny builder, tiny CPU recipe)
TINY = {
    "flux": (build_tiny_flux, "recipes/grpo_tiny_cpu.yaml"),
    "flux_kontext": (build_tiny_flux_kontext, "recipes/grpo_kontext_tiny_cpu.yaml"),
    "qwen_image": (build_tiny_qwen_image, "recipes/grpo_qwen_image_tiny_cpu.yaml"),
    "qwen_image_edit": (build_tiny_qwen_image_edit, "recipes/grpo_qwen_image_edit_tiny_cpu.yaml"),
    "sd3": (build_tiny_sd3, "recipes/grpo_sd35_tiny_cpu.yaml"),
    "flux2": (build_tiny_flux2, "recipes/grpo_flux2_tiny_cpu.yaml"),
    "flux2_klein": (build_tiny_flux2_klein, "recipes/grpo_flux2_klein_tiny_cpu.yaml"),
}
# real-size recipes (they name an accelerate launch): what each pipeline's real model is
REAL_SIZE = sorted(
    str(p) for p in Path("recipes").glob("grpo_*.yaml") if "recipes/accelerate/" in p.read_text()
)
QWEN_IMAGE_RECIPE = "recipes/grpo_qwen_image_t2is.yaml"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """pipeline -> its tiny model folder, built once per module on first use."""
    root = tmp_path_factory.mktemp("tiny-pipelines")

    @functools.cache
    def build(name: str) -> Path:
        return TINY[name][0](root / name, seed=0)

    return build


def _tiny_config(name: str, model_dir: Path, **overrides) -> GRPOConfig:
    base = {"model_name_or_path": str(model_dir), "report_to": []}
    return GRPOConfig.from_yaml(TINY[name][1], {**base, **overrides})


# ---------------------------------------------------------------- the registry
def test_every_registered_pipeline_has_a_tiny_model_and_recipes():
    assert set(TINY) == set(PIPELINE_SPECS) == set(PIPELINES)
    assert EDIT_PIPELINES == ("flux_kontext", "qwen_image_edit")
    real = {GRPOConfig.from_yaml(r).pipeline for r in REAL_SIZE}
    assert real == set(PIPELINE_SPECS)
    for name, spec in PIPELINE_SPECS.items():
        assert spec.name == name and issubclass(spec.sampler, GRPOSampler)
        assert issubclass(getattr(diffusers, spec.diffusers_class), diffusers.DiffusionPipeline)
        fields = {f.name for f in dataclasses.fields(GRPOConfig)}
        parameters = inspect.signature(spec.sampler).parameters
        assert set(spec.config_kwargs) <= fields & set(parameters), name
        assert GRPOConfig.from_yaml(TINY[name][1]).pipeline == name


def test_registry_lookups_and_registration_fail_naming_the_names():
    assert get_pipeline_spec("qwen_image").diffusers_class == "QwenImagePipeline"
    with pytest.raises(InputError, match=r"Unknown pipeline 'qwen'; registered pipelines: \("):
        get_pipeline_spec("qwen")
    taken = PipelineSpec("flux", GRPOSampler, "FluxPipeline")
    with pytest.raises(InputError, match="'flux' is already registered"):
        register_pipeline(taken)
    assert register_pipeline(PIPELINE_SPECS["flux"]) is PIPELINE_SPECS["flux"]  # idempotent
    with pytest.raises(
        ConfigError, match=r"pipeline must be one of \('flux', 'flux2', .*'sd3'\); got 'sdxl'"
    ):
        GRPOConfig.from_dict(
            {"model_name_or_path": "m", "prompt_file": "p.txt", "pipeline": "sdxl",
             "rewards": {"panel_colour_agreement": 1.0}}
        )  # fmt: skip


# ---------------------------------------------------------------- SDE log-probabilities
def _closed_form_log_prob(x, v, sigma, sigma_next, a, sigma_max, x_next) -> np.ndarray:
    """log N(x_next; mean, std^2) of Flow-GRPO's SDE step (eq. 9-10), per sample, in float64."""
    x, v, x_next = (t.double().numpy() for t in (x, v, x_next))
    sigma, sigma_next = float(sigma), float(sigma_next)
    dt = sigma_next - sigma
    std_t = a * math.sqrt(sigma / (1 - (sigma_max if sigma == 1 else sigma)))
    mean = (
        x * (1 + std_t**2 * dt / (2 * sigma)) + v * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
    )
    std = std_t * math.sqrt(-dt)
    return norm.logpdf(x_next, loc=mean, scale=std).reshape(len(x), -1).mean(axis=1)


def test_a_pipeline_path_that_is_not_there_is_named_not_taken_for_a_hub_id():
    """A typed error that says what was meant, where diffusers raised a bare ValueError ("is
    neither a valid local path nor a valid repo id"; for ``/nope``, the hub's "Repo id must
    use alphanumeric chars")."""
    cfg = _tiny_config("flux", Path("runs/flux/final"))
    with pytest.raises(PathNotFoundError, match="No pipeline folder exists at 'runs/flux/final'"):
        load_pipeline(cfg, "cpu")


@pytest.mark.parametrize("name", list(TINY))
def test_a_recorded_sde_step_has_the_closed_form_log_prob(name, tiny_models):
    """Sampled as the trainer samples (its recipe's train section, two prompts), each recorded
    transition re-scored through ``transition_velocity`` has the closed-form log-density."""
    cfg = _tiny_config(name, tiny_models(name))
    pipe = load_pipeline(cfg, "cpu")
    pipe.set_progress_bar_config(disable=True)
    sampler = build_sampler(cfg, pipe)
    assert type(sampler) is get_pipeline_spec(name).sampler
    items = load_prompts(cfg.prompt_file, cfg.prompt_format, cfg.layout)
    tc, a, steps = cfg.train, 0.8, [0, 2]
    call = {"num_steps": tc.num_steps, "guidance_scale": tc.guidance_scale, "noise_level": a,
            "noise_steps": steps, "generator": torch.Generator().manual_seed(0)}  # fmt: skip
    if get_pipeline_spec(name).edits:  # two instructions on references of one size
        items = edit_items(cfg, [items[0], items[2]], tc.resolution, sampler.size_multiple)
        references = [it.metadata["source_image"] for it in items]
        height, width = references[0].height, references[0].width
        out = sampler([it.prompt for it in items], references, **call)
    else:
        items, references = items[:2], None
        height = width = tc.resolution
        out = sampler([it.prompt for it in items], height=height, width=width, **call)
    prompts = [it.prompt for it in items]
    assert out.images.shape == (2, 3, height, width) and out.log_probs.shape == (2, 2)
    assert out.noise_steps == steps
    schedule = out.schedule
    for j, step in enumerate(steps):
        x, x_next = out.noise_latents[:, j], out.noise_next_latents[:, j]
        with torch.no_grad():
            v = sampler.transition_velocity(
                pipe.transformer, x, schedule.timesteps[step], prompts, height, width,
                tc.guidance_scale, references,
            )  # fmt: skip
        expected = _closed_form_log_prob(
            x, v, schedule.sigmas[step], schedule.sigmas[step + 1], a, schedule.sigma_max, x_next
        )
        np.testing.assert_allclose(out.log_probs[:, j].numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(TINY))
def test_a_recorded_cps_step_rescores_to_its_log_prob(name, tiny_models):
    """With ``train.sde_type: cps`` each pipeline records CPS transitions whose log-probability,
    re-scored as the GRPO loss re-scores them (``transition_velocity``, then the scheduler
    with the recorded sample), is the recorded one: the first update is on-policy."""
    cfg = _tiny_config(name, tiny_models(name), **{"train.sde_type": "cps"})
    pipe = load_pipeline(cfg, "cpu")
    pipe.set_progress_bar_config(disable=True)
    sampler = build_sampler(cfg, pipe)
    scheduler = FlowGRPOScheduler(0.8, "cps")
    items = load_prompts(cfg.prompt_file, cfg.prompt_format, cfg.layout)
    tc, steps = cfg.train, [0, 1]
    call = {"num_steps": tc.num_steps, "guidance_scale": tc.guidance_scale, "noise_level": 0.8,
            "noise_steps": steps, "generator": torch.Generator().manual_seed(0),
            "scheduler": scheduler}  # fmt: skip
    if get_pipeline_spec(name).edits:
        items = edit_items(cfg, [items[0], items[2]], tc.resolution, sampler.size_multiple)
        references = [it.metadata["source_image"] for it in items]
        height, width = references[0].height, references[0].width
        out = sampler([it.prompt for it in items], references, output_type="latent", **call)
    else:
        items, references = items[:2], None
        height = width = tc.resolution
        out = sampler([it.prompt for it in items], height=height, width=width,
                      output_type="latent", **call)  # fmt: skip
    prompts = [it.prompt for it in items]
    schedule = out.schedule
    for j, step in enumerate(steps):
        x, x_next = out.noise_latents[:, j], out.noise_next_latents[:, j]
        with torch.no_grad():
            v = sampler.transition_velocity(
                pipe.transformer, x, schedule.timesteps[step], prompts, height, width,
                tc.guidance_scale, references,
            )  # fmt: skip
        again = scheduler.step(
            v,
            schedule.sigmas[step],
            schedule.sigmas[step + 1],
            x,
            sigma_max=schedule.sigma_max,
            prev_sample=x_next,
        )
        assert torch.isfinite(out.log_probs[:, j]).all()
        torch.testing.assert_close(again.log_prob, out.log_probs[:, j], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- training on the tiny models
def _lora(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items() if "lora" in k}


@pytest.mark.parametrize("name", list(TINY))
def test_one_grpo_step_changes_the_lora_and_a_resume_continues(name, tiny_models, tmp_path):
    shape = {"prompts_per_epoch": 2, "num_generations": 4, "sample_batch_size": 8,
             "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
             "num_iterations": 1, "test.every": 0, "num_sample_images": 0,
             "save_every": 1}  # fmt: skip
    first = _tiny_config(name, tiny_models(name), num_train_epochs=1, output_dir=str(tmp_path / "a"),
                         **shape)  # fmt: skip
    trainer = GRPOTrainer(first)
    before = _lora(trainer.transformer)
    (row,) = trainer.train()
    assert np.isfinite(row["train/loss"]) and row["train/optimizer_steps"] >= 1
    trained = _lora(trainer.transformer)
    changed = sorted(k for k in trained if not torch.equal(trained[k], before[k]))
    # every adapted layer moved (its A only after a first step: peft starts B at zero)
    assert {k for k in trained if "lora_B" in k} <= set(changed), changed

    resumed = GRPOTrainer(
        _tiny_config(
            name, tiny_models(name), num_train_epochs=2, output_dir=str(tmp_path / "b"),
            resume_from_checkpoint=str(tmp_path / "a" / "checkpoints" / "checkpoint-00001"),
            **shape,
        )
    )  # fmt: skip
    assert resumed.start_epoch == 1
    loaded = _lora(resumed.transformer)
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)
    assert [r["epoch"] for r in resumed.train()] == [1]
    assert any(not torch.equal(v, trained[k]) for k, v in _lora(resumed.transformer).items())


# ---------------------------------------------------------------- LoRA targets, real size
@functools.cache
def _real_linear_layers(model: str) -> tuple[str, ...]:
    """The Linear layers of ``model``'s real transformer, built on the meta device."""
    transformer = build_empty(pipeline_configs(model)["transformer"])
    return tuple(n for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear))


def _matches(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)  # peft's rule for a module name


@pytest.mark.parametrize("recipe", sorted(str(p) for p in Path("recipes").glob("grpo_*.yaml")))
def test_every_recipe_adapts_modules_of_its_real_transformer(recipe):
    """Each of a recipe's ``lora_target_modules`` names Linear layers of the real
    architecture of its pipeline (tiny recipes: the real-size recipe's model)."""
    cfg = GRPOConfig.from_yaml(recipe)
    models = {GRPOConfig.from_yaml(r).pipeline: GRPOConfig.from_yaml(r).model_name_or_path
              for r in REAL_SIZE}  # fmt: skip
    linear = _real_linear_layers(models[cfg.pipeline])
    for target in cfg.lora_target_modules:
        assert any(_matches(n, target) for n in linear), target


def test_the_qwen_image_recipe_wraps_720_linear_layers():
    """peft on the real Qwen-Image transformer with the recipe's targets: its 60 dual-stream
    blocks x 12 projections = 720 LoRA-wrapped Linear layers, 424.7 M LoRA parameters at r64
    (what ``paco-grpo plan`` counts)."""
    from peft import LoraConfig
    from peft.tuners.lora import LoraLayer

    cfg = GRPOConfig.from_yaml(QWEN_IMAGE_RECIPE)
    transformer = build_empty(pipeline_configs(cfg.model_name_or_path)["transformer"])
    with torch.device("meta"):
        transformer.add_adapter(
            LoraConfig(
                r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules=cfg.lora_target_modules
            )
        )
    wrapped = [
        n
        for n, m in transformer.named_modules()
        if isinstance(m, LoraLayer) and isinstance(m.get_base_layer(), torch.nn.Linear)
    ]
    assert len(wrapped) == 60 * 12 == 720
    lora = sum(p.numel() for n, p in transformer.named_parameters() if "lora_" in n)
    assert lora == pytest.approx(424.7e6, rel=1e-3)


# ---------------------------------------------------------------- Qwen-Image = diffusers
@pytest.fixture(scope="module")
def qwen_image(tiny_models):
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(tiny_models("qwen_image"))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_tiny_qwen_image_has_the_real_shapes_that_matter(qwen_image, tiny_models, tmp_path):
    from diffusers import QwenImagePipeline

    assert qwen_image.vae_scale_factor == 8 and not qwen_image.transformer.config.guidance_embeds
    assert qwen_image.scheduler.config.use_dynamic_shifting
    again = QwenImagePipeline.from_pretrained(build_tiny_qwen_image(tmp_path / "q", seed=0))
    for a, b in zip(
        qwen_image.transformer.state_dict().values(), again.transformer.state_dict().values()
    ):
        assert torch.equal(a, b)


@pytest.mark.parametrize("noise_steps", [[], [1, 2]])
def test_qwen_image_noise_level_zero_equals_diffusers_with_true_cfg(qwen_image, noise_steps):
    from paco_grpo.pipelines import QwenImageGRPOSampler

    prompt = "a red fox in a 2x2 grid"
    expected = qwen_image(
        prompt,
        negative_prompt=" ",
        true_cfg_scale=4.0,
        height=32,
        width=48,
        num_inference_steps=4,
        num_images_per_prompt=2,
        generator=torch.Generator().manual_seed(7),
        output_type="pt",
    ).images
    sampler = QwenImageGRPOSampler(qwen_image, negative_prompt=" ")
    ours = sampler(
        [prompt] * 2,
        height=32,
        width=48,
        num_steps=4,
        guidance_scale=4.0,
        noise_level=0.0,
        noise_steps=noise_steps,
        generator=torch.Generator().manual_seed(7),
    )
    assert ours.images.shape == expected.shape == (2, 3, 32, 48)
    assert torch.equal(ours.images, expected)
    torch.testing.assert_close(
        ours.schedule.timesteps, qwen_image.scheduler.timesteps, rtol=0, atol=0
    )
    torch.testing.assert_close(ours.schedule.sigmas, qwen_image.scheduler.sigmas, rtol=0, atol=0)


def test_qwen_image_pads_prompts_of_different_lengths_as_diffusers(qwen_image):
    """Prompts of different lengths are encoded one at a time (cached), then padded with a
    mask: given those encodings, diffusers samples the same images, masks included."""
    from paco_grpo.pipelines import QwenImageGRPOSampler

    prompts = ["a red fox in a 2x2 grid", "a bird"]
    sampler = QwenImageGRPOSampler(qwen_image, max_sequence_length=64, negative_prompt=" ")
    cond = sampler.condition(prompts, 32, 32)
    assert cond.mask is not None and cond.mask.sum(1).tolist()[0] > cond.mask.sum(1).tolist()[1]
    assert cond.negative_mask is None and cond.prompt_embeds.shape[1] <= 64
    expected = qwen_image(
        prompt_embeds=cond.prompt_embeds,
        prompt_embeds_mask=cond.mask,
        negative_prompt_embeds=cond.negative_prompt_embeds,
        negative_prompt_embeds_mask=torch.ones(cond.negative_prompt_embeds.shape[:2]).long(),
        true_cfg_scale=3.0,
        height=32,
        width=32,
        num_inference_steps=3,
        generator=torch.Generator().manual_seed(1),
        output_type="pt",
    ).images
    ours = sampler(
        prompts,
        height=32,
        width=32,
        num_steps=3,
        guidance_scale=3.0,
        noise_level=0.0,
        noise_steps=[],
        generator=torch.Generator().manual_seed(1),
    )
    assert torch.equal(ours.images, expected)
    assert len(sampler._cache) == 3  # two prompts and the negative one


def test_qwen_image_sampler_validates_its_inputs(qwen_image):
    from paco_grpo.pipelines import QwenImageGRPOSampler

    with pytest.raises(InputError, match="at most 1024 for Qwen-Image; got 2048"):
        QwenImageGRPOSampler(qwen_image, max_sequence_length=2048)
    sampler = QwenImageGRPOSampler(qwen_image)
    with pytest.raises(InputError, match="multiples of 16; got 40x32"):
        sampler(["a"], height=40, width=32, num_steps=2)
    with pytest.raises(InputError, match=r"noise_steps \[3\] must lie in \[0, 1\]"):
        sampler(["a"], height=32, width=32, num_steps=2, noise_steps=[3])
