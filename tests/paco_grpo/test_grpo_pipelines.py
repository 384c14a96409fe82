"""paco_grpo.pipelines, every registered generator alike: the registry; the sampler against
its diffusers pipeline at ``noise_level = 0``; a recorded SDE step's log-probability against
the closed form and a recorded CPS step re-scored; one GRPO step and a resume on the tiny
model, its checkpoint loaded by the diffusers pipeline; the default LoRA targets on the real
architecture; what the GPU check fakes of the text encoder.

Each test is parametrized over :data:`~paco_grpo.pipelines.PIPELINE_SPECS`: a new model is
covered by its file's registration and the test case beside its tiny builder (``TEST_CASES``,
read by tests/paco_grpo/conftest.py)."""

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
from PIL import Image
from scipy.stats import norm

from paco_grpo.architectures import pipeline_configs
from paco_grpo.data import load_prompts
from paco_grpo.grpo_config import GRPOConfig
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
from paco_reward.architectures import build_empty
from paco_reward.errors import ConfigError, InputError, PathNotFoundError

NAMES = list(PIPELINE_SPECS)
# real-size recipes (they name an accelerate launch): what each pipeline's real model is
REAL_SIZE = sorted(
    str(p) for p in Path("recipes").glob("grpo_*.yaml") if "recipes/accelerate/" in p.read_text()
)


def _config(tiny, name: str, model_dir: Path, **overrides) -> GRPOConfig:
    base = {"model_name_or_path": str(model_dir), "report_to": []}
    return GRPOConfig.from_yaml(tiny[name].recipe, {**base, **overrides})


def _image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@functools.cache
def _pipeline(model_dir: Path, name: str):
    pipe = getattr(diffusers, get_pipeline_spec(name).diffusers_class).from_pretrained(model_dir)
    pipe.set_progress_bar_config(disable=True)
    return pipe


# ---------------------------------------------------------------- the registry
def test_every_registered_pipeline_has_a_test_case_a_tiny_recipe_and_a_real_one(tiny):
    missing = [name for name in PIPELINE_SPECS if name not in tiny]
    assert not missing, f"no TEST_CASES entry beside the tiny builders of {missing}"
    real = {GRPOConfig.from_yaml(r).pipeline for r in REAL_SIZE}
    assert real == set(PIPELINE_SPECS)
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    for name, spec in PIPELINE_SPECS.items():
        assert spec.name == name and issubclass(spec.sampler, GRPOSampler)
        assert issubclass(getattr(diffusers, spec.diffusers_class), diffusers.DiffusionPipeline)
        parameters = inspect.signature(spec.sampler).parameters
        assert set(spec.config_kwargs) <= fields & set(parameters), name
        assert GRPOConfig.from_yaml(tiny[name].recipe).pipeline == name
        assert spec.architectures and spec.lora_target_modules


def test_registry_lookups_and_registration_fail_naming_the_names():
    assert get_pipeline_spec("qwen_image").diffusers_class == "QwenImagePipeline"
    with pytest.raises(InputError, match=r"Unknown pipeline 'qwen'; registered pipelines: \("):
        get_pipeline_spec("qwen")
    taken = dataclasses.replace(PIPELINE_SPECS["flux"], sampler=GRPOSampler)
    with pytest.raises(InputError, match="'flux' is already registered"):
        register_pipeline(taken)
    assert register_pipeline(PIPELINE_SPECS["flux"]) is PIPELINE_SPECS["flux"]  # idempotent
    with pytest.raises(
        ConfigError, match=r"pipeline must be one of \('flux', 'flux2', .*'sd3'.*\); got 'sdxl'"
    ):
        GRPOConfig.from_dict(
            {"model_name_or_path": "m", "prompt_file": "p.txt", "pipeline": "sdxl",
             "rewards": {"panel_colour_agreement": 1.0}}
        )  # fmt: skip
    assert isinstance(PIPELINE_SPECS["sd3"], PipelineSpec)


# ---------------------------------------------------------------- = diffusers at a = 0
@pytest.mark.parametrize("name", NAMES)
def test_noise_level_zero_equals_the_diffusers_pipeline(name, tiny, tiny_pipeline_dir):
    """The sampler returns what the diffusers pipeline returns for the same seed, bit for bit,
    SDE steps at a = 0 included, on the pipeline's own timesteps."""
    spec, case = get_pipeline_spec(name), tiny[name].parity
    pipe = _pipeline(tiny_pipeline_dir(name), name)
    height, width = case.size
    references = [_image(w, h, seed=k) for k, (w, h) in enumerate(case.references)]
    call = {"height": height, "width": width, "num_inference_steps": 4, "output_type": "pt",
            "num_images_per_prompt": case.copies, "generator": torch.Generator().manual_seed(7),
            **case.diffusers}  # fmt: skip
    if references:
        call["image"] = references if spec.sampler.max_references != 1 else references[0]
    expected = pipe(prompt=list(case.prompts), **call).images
    sampler = spec.sampler(pipe, **case.sampler)
    prompts = [p for p in case.prompts for _ in range(case.copies)]
    ours = sampler(
        prompts,
        [references] * len(prompts) if references else None,
        height=height,
        width=width,
        area=case.area,
        num_steps=4,
        guidance_scale=case.guidance_scale,
        noise_level=0.0,
        noise_steps=[1, 2],
        generator=torch.Generator().manual_seed(7),
    )
    assert ours.images.shape == expected.shape == (len(prompts), 3, height, width)
    assert torch.equal(ours.images, expected)
    assert torch.equal(ours.schedule.timesteps, pipe.scheduler.timesteps)
    assert torch.equal(ours.schedule.sigmas, pipe.scheduler.sigmas)


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


def test_a_pipeline_path_that_is_not_there_is_named_not_taken_for_a_hub_id(tiny):
    """A typed error that says what was meant, where diffusers raised a bare ValueError ("is
    neither a valid local path nor a valid repo id"; for ``/nope``, the hub's "Repo id must
    use alphanumeric chars")."""
    cfg = _config(tiny, "flux", Path("runs/flux/final"))
    with pytest.raises(PathNotFoundError, match="No pipeline folder exists at 'runs/flux/final'"):
        load_pipeline(cfg, "cpu")


def _sample_as_the_trainer(name, tiny, model_dir, noise_level, steps, scheduler=None, **extra):
    """Two prompts of the tiny recipe sampled as the trainer samples them (its train section),
    with the recorded steps re-scored through ``transition_velocity``: ``(out, velocities)``."""
    cfg = _config(tiny, name, model_dir, **extra)
    pipe = _pipeline(model_dir, name)  # as load_pipeline(cfg) loads it (float32), once
    sampler = build_sampler(cfg, pipe)
    assert type(sampler) is get_pipeline_spec(name).sampler
    items = load_prompts(cfg.prompt_file, cfg.prompt_format, cfg.layout)
    tc = cfg.train
    call = {"num_steps": tc.num_steps, "guidance_scale": tc.guidance_scale,
            "noise_level": noise_level, "noise_steps": steps, "scheduler": scheduler,
            "generator": torch.Generator().manual_seed(0)}  # fmt: skip
    if get_pipeline_spec(name).edits:  # two instructions on references of one size
        items = edit_items(cfg, [items[0], items[2]], tc.resolution, sampler.size_multiple)
        references = [it.metadata["source_images"] for it in items]
        height, width = references[0][0].height, references[0][0].width
        out = sampler([it.prompt for it in items], references, **call)
    else:
        items, references = items[:2], None
        height = width = tc.resolution
        out = sampler([it.prompt for it in items], height=height, width=width, **call)
    assert out.images.shape == (2, 3, height, width) and out.log_probs.shape == (2, len(steps))
    assert out.noise_steps == steps and torch.isfinite(out.log_probs).all()
    prompts = [it.prompt for it in items]
    velocities = []
    for j, step in enumerate(steps):
        with torch.no_grad():
            velocities.append(
                sampler.transition_velocity(
                    pipe.transformer,
                    out.noise_latents[:, j],
                    out.schedule.timesteps[step],
                    prompts,
                    height,
                    width,
                    tc.guidance_scale,
                    references,
                )  # fmt: skip
            )
    return out, velocities


@pytest.mark.parametrize("name", NAMES)
def test_a_recorded_sde_step_has_the_closed_form_log_prob(name, tiny, tiny_pipeline_dir):
    """Each recorded transition re-scored through ``transition_velocity`` has the closed-form
    log-density of Flow-GRPO's SDE step."""
    a, steps = 0.8, [0, 2]
    out, velocities = _sample_as_the_trainer(name, tiny, tiny_pipeline_dir(name), a, steps)
    schedule = out.schedule
    for j, (step, v) in enumerate(zip(steps, velocities)):
        x, x_next = out.noise_latents[:, j], out.noise_next_latents[:, j]
        expected = _closed_form_log_prob(
            x, v, schedule.sigmas[step], schedule.sigmas[step + 1], a, schedule.sigma_max, x_next
        )
        np.testing.assert_allclose(out.log_probs[:, j].numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_a_recorded_cps_step_rescores_to_its_log_prob(name, tiny, tiny_pipeline_dir):
    """With ``train.sde_type: cps`` the recorded CPS transitions re-score, as the GRPO loss
    re-scores them, to the recorded log-probability: the first update is on-policy."""
    scheduler, steps = FlowGRPOScheduler(0.8, "cps"), [0, 1]
    out, velocities = _sample_as_the_trainer(
        name, tiny, tiny_pipeline_dir(name), 0.8, steps, scheduler, **{"train.sde_type": "cps"}
    )
    schedule = out.schedule
    for j, (step, v) in enumerate(zip(steps, velocities)):
        x, x_next = out.noise_latents[:, j], out.noise_next_latents[:, j]
        again = scheduler.step(v, schedule.sigmas[step], schedule.sigmas[step + 1], x,
                               sigma_max=schedule.sigma_max, prev_sample=x_next)  # fmt: skip
        torch.testing.assert_close(again.log_prob, out.log_probs[:, j], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- training on the tiny models
def _lora(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items() if "lora" in k}


@pytest.mark.parametrize("name", NAMES)
def test_one_grpo_step_changes_the_lora_and_a_resume_continues(name, tiny, tiny_pipeline_dir,
                                                               tmp_path):  # fmt: skip
    """One epoch moves every LoRA B; its checkpoint loads into the diffusers pipeline
    (``load_lora_weights``) and resumes a run that trains on."""
    model_dir = tiny_pipeline_dir(name)
    shape = {"prompts_per_epoch": 2, "num_generations": 4, "sample_batch_size": 8,
             "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
             "num_iterations": 1, "test.eval_epochs": 0, "num_sample_images": 0,
             "save_epochs": 1}  # fmt: skip
    first = _config(tiny, name, model_dir, num_train_epochs=1, output_dir=str(tmp_path / "a"),
                    **shape)  # fmt: skip
    trainer = GRPOTrainer(first)
    before = _lora(trainer.transformer)
    (row,) = trainer.train()
    assert np.isfinite(row["train/loss"]) and row["train/optimizer_steps"] >= 1
    trained = _lora(trainer.transformer)
    changed = sorted(k for k in trained if not torch.equal(trained[k], before[k]))
    # every adapted layer moved (its A only after a first step: peft starts B at zero)
    assert {k for k in trained if "lora_B" in k} <= set(changed), changed

    checkpoint = tmp_path / "a" / "checkpoints" / "checkpoint-00001"
    pipe = getattr(diffusers, get_pipeline_spec(name).diffusers_class).from_pretrained(model_dir)
    pipe.load_lora_weights(checkpoint)
    loaded = {k: v for k, v in pipe.transformer.state_dict().items() if "lora" in k}
    assert len(loaded) == len(trained) > 0
    for (ka, va), (kb, vb) in zip(sorted(trained.items()), sorted(loaded.items())):
        assert torch.equal(va, vb), (ka, kb)

    resumed = GRPOTrainer(
        _config(tiny, name, model_dir, num_train_epochs=2, output_dir=str(tmp_path / "b"),
                resume_from_checkpoint=str(checkpoint), **shape)
    )  # fmt: skip
    assert resumed.start_epoch == 1
    loaded = _lora(resumed.transformer)
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)
    assert [r["epoch"] for r in resumed.train()] == [2]  # counted from 1, as checkpoints
    assert any(not torch.equal(v, trained[k]) for k, v in _lora(resumed.transformer).items())


# ---------------------------------------------------------------- LoRA targets, real size
@functools.cache
def _real_linear_layers(model: str) -> tuple[str, ...]:
    """The Linear layers of ``model``'s real transformer, built on the meta device."""
    transformer = build_empty(pipeline_configs(model)["transformer"])
    return tuple(n for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear))


def _adapted(targets, layers) -> list[str]:
    """The Linear layers peft wraps for ``targets`` (its rule: the name, or a dotted ending)."""
    return [n for n in layers if any(n == t or n.endswith("." + t) for t in targets)]


@pytest.mark.parametrize(
    ("name", "model"),
    [(name, model) for name, spec in PIPELINE_SPECS.items() for model in spec.architectures],
)
def test_default_lora_targets_name_linear_layers_of_the_real_transformer(name, model):
    """Each of a pipeline's default LoRA targets names Linear layers of every real
    transformer it ships (built on the meta device from the shipped config)."""
    layers = _real_linear_layers(model)
    for target in get_pipeline_spec(name).lora_target_modules:
        assert _adapted([target], layers), f"{name}: {target!r} adapts nothing in {model}"


@pytest.mark.parametrize("recipe", sorted(str(p) for p in Path("recipes").glob("grpo_*.yaml")))
def test_every_recipe_adapts_modules_of_its_real_transformer(recipe):
    """Each of a recipe's ``lora_target_modules`` (its own, or its pipeline's default) names
    Linear layers of the real architecture of its pipeline (tiny recipes: the first shipped)."""
    cfg = GRPOConfig.from_yaml(recipe)
    architectures = get_pipeline_spec(cfg.pipeline).architectures
    model = (
        cfg.model_name_or_path
        if cfg.model_name_or_path in architectures
        else next(iter(architectures))
    )
    layers = _real_linear_layers(model)
    for target in cfg.lora_target_modules:
        assert _adapted([target], layers), target


# The lists the real-size recipes wrote by hand before their pipelines had default targets
# (the FLUX.1 ones wrote none: FLUX.1's list was the default), and how many Linear layers of
# the real transformer they adapt (the recipes' comments: 12 projections in each of
# Qwen-Image's 60 blocks; 12 per FLUX.2 double block and 1 per single block).
QWEN_IMAGE_WRITTEN = (
    "attn.to_k attn.to_q attn.to_v attn.to_out.0 attn.add_k_proj attn.add_q_proj "
    "attn.add_v_proj attn.to_add_out img_mlp.net.0.proj img_mlp.net.2 txt_mlp.net.0.proj "
    "txt_mlp.net.2"
)
FLUX2_WRITTEN = (
    "attn.to_k attn.to_q attn.to_v attn.to_out.0 attn.add_k_proj attn.add_q_proj "
    "attn.add_v_proj attn.to_add_out ff.linear_in ff.linear_out ff_context.linear_in "
    "ff_context.linear_out attn.to_qkv_mlp_proj"
)
WRITTEN = {
    "recipes/grpo_flux_t2is.yaml": (None, 19 * 12 + 38 * 3),  # double blocks; single q/k/v
    "recipes/grpo_kontext_edit.yaml": (None, 19 * 12 + 38 * 3),
    "recipes/grpo_qwen_image_t2is.yaml": (QWEN_IMAGE_WRITTEN, 60 * 12),
    "recipes/grpo_qwen_image_edit.yaml": (QWEN_IMAGE_WRITTEN, 60 * 12),
    "recipes/grpo_qwen_image_edit_plus.yaml": (None, 60 * 12),  # new: its default
    "recipes/grpo_flux2_t2is.yaml": (FLUX2_WRITTEN, 12 * 8 + 48),
    "recipes/grpo_flux2_klein_t2is.yaml": (FLUX2_WRITTEN, 12 * 5 + 20),
    "recipes/grpo_zimage_t2is.yaml": (None, 34 * 7),  # new: its default, in all 34 blocks
    "recipes/grpo_sd35_t2is.yaml": (
        "attn.to_q attn.to_k attn.to_v attn.to_out.0 attn.add_q_proj attn.add_k_proj "
        "attn.add_v_proj attn.to_add_out",
        303,
    ),
}


@pytest.mark.parametrize("recipe", sorted(WRITTEN))
def test_a_real_size_recipe_without_its_target_list_trains_the_same_targets(recipe):
    """The real-size recipes leave ``lora_target_modules`` out: their pipeline's default then
    adapts exactly the Linear layers the list they used to write did (never FLUX.1's list on
    another model, which would leave Qwen-Image's and FLUX.2's MLPs untrained)."""
    assert "lora_target_modules" not in Path(recipe).read_text()
    cfg = GRPOConfig.from_yaml(recipe)
    written, count = WRITTEN[recipe]
    layers = _real_linear_layers(cfg.model_name_or_path)
    default = _adapted(cfg.lora_target_modules, layers)
    assert len(default) == count
    if written is not None:
        explicit = GRPOConfig.from_yaml(recipe, {"lora_target_modules": written.split()})
        assert _adapted(explicit.lora_target_modules, layers) == default


# ---------------------------------------------------------------- the GPU check's text
@pytest.mark.parametrize("name", [n for n, s in PIPELINE_SPECS.items() if not s.edits])
def test_text_shapes_are_what_encode_text_returns(name, tiny, tiny_pipeline_dir):
    """``benchmarks.gpu_check`` draws random tensors of the sampler's ``text_shapes`` in place of the
    text encoder: they are the structure and widths ``encode_text`` returns (a prompt's
    length at most ``max_sequence_length``, whose padding some pipelines cut off)."""
    spec = get_pipeline_spec(name)
    pipe = _pipeline(tiny_pipeline_dir(name), name)
    length = tiny[name].max_sequence_length
    sampler = spec.sampler(pipe, max_sequence_length=length)
    with torch.no_grad():
        encoded = sampler.encode_text("a red fox in a 2x2 grid", "cpu")
    shapes = spec.sampler.text_shapes(dict(pipe.transformer.config), length)
    assert len(encoded) == len(shapes)
    assert [t.shape[1:] for t in encoded] == [torch.Size(s[1:]) for s in shapes]
    assert all(t.shape[0] <= s[0] for t, s in zip(encoded, shapes))


# ---------------------------------------------------------------- the sampler's checks
def test_sampler_input_validation(tiny_pipeline_dir):
    pipe = _pipeline(tiny_pipeline_dir("flux"), "flux")
    sampler = get_pipeline_spec("flux").sampler(pipe, max_sequence_length=32)
    with pytest.raises(ValueError, match="multiples of 16; got 60x64"):
        sampler(["a"], height=60, width=64, num_steps=2)
    with pytest.raises(ValueError, match=r"noise_steps \[5\] must lie in \[0, 1\]"):
        sampler(["a"], height=64, width=64, num_steps=2, noise_steps=[5])
    with pytest.raises(ValueError, match="output_type must be 'pt' or 'latent'"):
        sampler(["a"], height=64, width=64, num_steps=2, output_type="pil")
    with pytest.raises(ValueError, match="FluxGRPOSampler samples text-to-image"):
        sampler(["a"], [_image(64, 64)], num_steps=2)
    with pytest.raises(ValueError, match="prompts is empty"):
        sampler([], height=64, width=64, num_steps=2)


def test_flux_schedule_equals_the_flux_pipelines_at_two_resolutions(tiny_pipeline_dir):
    """FLUX's resolution shift: the sigmas ``FluxPipeline`` uses at 64^2 and 256^2."""
    from paco_grpo.timesteps import flux_schedule

    pipe = _pipeline(tiny_pipeline_dir("flux"), "flux")
    for size in (64, 256):
        pipe("x", height=size, width=size, num_inference_steps=5, output_type="latent",
             max_sequence_length=32, generator=torch.Generator().manual_seed(0))  # fmt: skip
        ours = flux_schedule(pipe.scheduler, 5, (size // 16) ** 2)
        assert torch.equal(ours.timesteps, pipe.scheduler.timesteps)
        assert torch.equal(ours.sigmas, pipe.scheduler.sigmas)


def test_qwen_image_pads_prompts_of_different_lengths_as_diffusers(tiny_pipeline_dir):
    """Prompts of different lengths are encoded one at a time (cached), then padded with a
    mask: given those encodings, diffusers samples the same images, masks included."""
    pipe = _pipeline(tiny_pipeline_dir("qwen_image"), "qwen_image")
    sampler = get_pipeline_spec("qwen_image").sampler(pipe, max_sequence_length=64)
    prompts = ["a red fox in a 2x2 grid", "a bird"]
    cond = sampler.condition(prompts, 32, 32, 3.0)
    assert cond.mask is not None and cond.mask.sum(1).tolist()[0] > cond.mask.sum(1).tolist()[1]
    assert cond.negative_mask is None and cond.prompt_embeds.shape[1] <= 64
    expected = pipe(
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
    ours = sampler(prompts, height=32, width=32, num_steps=3, guidance_scale=3.0,
                   noise_level=0.0, noise_steps=[], generator=torch.Generator().manual_seed(1))  # fmt: skip
    assert torch.equal(ours.images, expected)
    assert len(sampler._text_cache) == 3  # two prompts and the negative one
    with pytest.raises(InputError, match="at most 1024 for Qwen-Image; got 2048"):
        get_pipeline_spec("qwen_image").sampler(pipe, max_sequence_length=2048)


# ---------------------------------------------------------------- what the caches keep
def _device_bytes(cache: dict) -> dict[str, int]:
    """Bytes of a sampler cache's tensors by device type."""
    out: dict[str, int] = {}
    for value in cache.values():
        for t in value if isinstance(value, tuple) else (value,):
            out[t.device.type] = out.get(t.device.type, 0) + t.numel() * t.element_size()
    return out


def test_the_caches_stay_on_the_host_and_each_batch_is_copied_to_its_device(tiny_pipeline_dir):
    """Prompt encodings and an edit's reference latents are cached in host memory whatever
    the device they are used on: 120 distinct prompts leave nothing on the device, and a
    cached batch asked for on another device (the meta device, standing in for a GPU) comes
    back there, one copy per distinct prompt, while the cache stays on the host."""
    pipe = _pipeline(tiny_pipeline_dir("flux"), "flux")
    sampler = get_pipeline_spec("flux").sampler(pipe, max_sequence_length=32)
    prompts = [f"a fox number {k}" for k in range(120)]
    for start in range(0, len(prompts), 40):
        sampler.encode_prompts(prompts[start : start + 40], "cpu")
    assert len(sampler._text_cache) == 120
    assert set(_device_bytes(sampler._text_cache)) == {"cpu"}  # nothing on a device
    group = [prompts[7]] * 4 + [prompts[8]] * 4
    moved = sampler.encode_prompts(group, "meta")
    assert {t.device.type for text in moved for t in text} == {"meta"}
    assert moved[0][0] is moved[3][0] and moved[0][0] is not moved[4][0]  # one copy a prompt
    assert len(sampler._text_cache) == 120 and set(_device_bytes(sampler._text_cache)) == {"cpu"}
    with torch.no_grad():  # as encode_prompts encodes (autograd picks other CPU kernels)
        alone = sampler.encode_text(prompts[7], "cpu")
    assert torch.equal(sampler.encode_prompts(group, "cpu")[0][0], alone[0])

    kontext = _pipeline(tiny_pipeline_dir("flux_kontext"), "flux_kontext")
    editor = get_pipeline_spec("flux_kontext").sampler(kontext, max_sequence_length=32)
    references = [[_image(32, 32, seed=k)] for k in range(3)]
    latents = editor.encode_references(references, "cpu")
    assert set(_device_bytes(editor._image_cache)) == {"cpu"} and len(editor._image_cache) == 3
    again = editor.encode_references(references, "meta")
    assert again.device.type == "meta" and again.shape == latents.shape
    assert set(_device_bytes(editor._image_cache)) == {"cpu"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_prompt_cache_is_pinned_host_memory(tiny_pipeline_dir):
    """On CUDA: encoding 200 distinct prompts leaves no more on the GPU than one batch's
    copies, and the cache is page-locked host memory."""
    pipe = diffusers.FluxPipeline.from_pretrained(tiny_pipeline_dir("flux")).to("cuda")
    sampler = get_pipeline_spec("flux").sampler(pipe, max_sequence_length=32)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for start in range(0, 200, 20):
        batch = sampler.encode_prompts([f"a fox number {k}" for k in range(start, start + 20)])
    torch.cuda.synchronize()
    one_batch = sum(t.numel() * t.element_size() for text in batch for t in text)
    assert torch.cuda.memory_allocated() - before <= one_batch
    assert set(_device_bytes(sampler._text_cache)) == {"cpu"}
    assert all(t.is_pinned() for text in sampler._text_cache.values() for t in text)
