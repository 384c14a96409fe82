"""FLUX.2-dev and FLUX.2-klein on their tiny pipelines: a = 0 equals diffusers' own pipeline
(embedded guidance for FLUX.2-dev, true CFG for the klein base model); SDE and CPS steps
re-score to their recorded log-probabilities; the recipes' LoRA targets exist in the real
transformers; one GRPO epoch moves every LoRA tensor and a resumed run continues."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import Flux2KleinPipeline, Flux2Pipeline
from safetensors.torch import load_file

from paco_grpo.grpo_config import FLUX2_LORA_TARGETS, GRPOConfig
from paco_grpo.pipelines import Flux2GRPOSampler, get_pipeline_spec
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.testing.flux2 import build_tiny_flux2, build_tiny_flux2_klein

PROMPTS = ["a red fox in a 2x2 grid", "a blue bird"]
TINY_RECIPE = "recipes/grpo_flux2_klein_tiny_cpu.yaml"
# pipeline name -> (builder, diffusers class, guidance scale the tests sample with)
MODELS = {
    "flux2_klein": (build_tiny_flux2_klein, Flux2KleinPipeline, 4.0),
    "flux2": (build_tiny_flux2, Flux2Pipeline, 3.5),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request, tmp_path_factory):
    """(pipeline name, folder, loaded pipeline) of each tiny FLUX.2."""
    build, cls, _ = MODELS[request.param]
    path = build(tmp_path_factory.mktemp(request.param) / "model", seed=0)
    pipe = cls.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    return request.param, path, pipe


def test_registered_and_round_trips_through_from_pretrained(model):
    name, path, pipe = model
    spec = get_pipeline_spec(name)
    assert spec.sampler is Flux2GRPOSampler and spec.diffusers_class == type(pipe).__name__
    assert spec.true_cfg == (name == "flux2_klein")
    other = type(pipe).from_pretrained(path)
    for a, b in zip(
        pipe.transformer.state_dict().values(), other.transformer.state_dict().values()
    ):
        assert torch.equal(a, b)
    assert pipe.vae_scale_factor == 8
    assert pipe.transformer.config.guidance_embeds == (name == "flux2")
    if name == "flux2_klein":
        assert pipe.config.is_distilled is False  # a base klein: true CFG runs


@pytest.mark.parametrize("noise_steps", [[], [1, 2]])
def test_noise_level_zero_equals_the_diffusers_pipeline(model, noise_steps):
    name, _, pipe = model
    guidance = MODELS[name][2]
    expected = pipe(
        prompt=PROMPTS,
        height=64,
        width=96,
        num_inference_steps=4,
        guidance_scale=guidance,
        num_images_per_prompt=2,
        generator=torch.Generator().manual_seed(7),
        output_type="pt",
        max_sequence_length=48,
    ).images
    sampler = Flux2GRPOSampler(pipe, max_sequence_length=48)
    assert sampler.true_cfg(guidance) == (name == "flux2_klein")
    ours = sampler(
        [p for p in PROMPTS for _ in range(2)],
        height=64,
        width=96,
        num_steps=4,
        guidance_scale=guidance,
        noise_level=0.0,
        noise_steps=noise_steps,
        generator=torch.Generator().manual_seed(7),
    )
    assert ours.images.shape == expected.shape == (4, 3, 64, 96)
    assert torch.equal(ours.images, expected)
    # the timesteps are the ones the pipeline's scheduler used (FLUX.2's empirical mu)
    assert torch.equal(ours.schedule.timesteps, pipe.scheduler.timesteps)
    assert torch.equal(ours.schedule.sigmas, pipe.scheduler.sigmas)


@pytest.mark.parametrize(
    ("sde_type", "cps_log_prob"), [("sde", "gaussian"), ("cps", "gaussian"), ("cps", "released")]
)
def test_sde_steps_are_recorded_and_rescorable(model, sde_type, cps_log_prob):
    name, _, pipe = model
    guidance = MODELS[name][2]
    sampler = Flux2GRPOSampler(pipe, max_sequence_length=48)
    scheduler = FlowGRPOScheduler(0.7, sde_type=sde_type, cps_log_prob=cps_log_prob)
    kwargs = {"height": 64, "width": 64, "num_steps": 4, "noise_level": 0.7,
              "guidance_scale": guidance, "noise_steps": [0, 2], "scheduler": scheduler}  # fmt: skip
    out = sampler(PROMPTS, generator=torch.Generator().manual_seed(0), **kwargs)
    assert out.noise_latents.shape == out.noise_next_latents.shape == (2, 2, 16, 16)
    assert out.log_probs.shape == (2, 2) and torch.isfinite(out.log_probs).all()
    # the trainer's re-scoring path gives the recorded log-probs (the first ratio is 1)
    for j, step in enumerate(out.noise_steps):
        x = out.noise_latents[:, j]
        v = sampler.transition_velocity(
            pipe.transformer, x, out.schedule.timesteps[step], PROMPTS, 64, 64, guidance
        )
        again = scheduler.step(
            v,
            out.schedule.sigmas[step],
            out.schedule.sigmas[step + 1],
            x,
            sigma_max=out.schedule.sigma_max,
            prev_sample=out.noise_next_latents[:, j],
        )
        torch.testing.assert_close(again.log_prob, out.log_probs[:, j], rtol=1e-5, atol=1e-5)
    other = sampler(PROMPTS, generator=torch.Generator().manual_seed(1), **kwargs)
    assert not np.allclose(other.images.numpy(), out.images.numpy())


def test_sde_log_prob_is_the_gaussian_closed_form(model):
    """The recorded log-prob of an SDE step is the Gaussian density of the transition with
    Flow-GRPO's mean and std (Eq. 9 of Flow-GRPO), computed here by hand."""
    name, _, pipe = model
    sampler = Flux2GRPOSampler(pipe, max_sequence_length=48)
    a, guidance = 0.7, MODELS[name][2]
    out = sampler(PROMPTS, height=32, width=32, num_steps=3, noise_level=a, noise_steps=[1],
                  guidance_scale=guidance, generator=torch.Generator().manual_seed(3))  # fmt: skip
    x, nxt = out.noise_latents[:, 0].double(), out.noise_next_latents[:, 0].double()
    t = out.schedule.timesteps[1]
    v = sampler.transition_velocity(pipe.transformer, out.noise_latents[:, 0], t, PROMPTS, 32, 32,
                                    guidance).double()  # fmt: skip
    s, s_next = float(out.schedule.sigmas[1]), float(out.schedule.sigmas[2])
    s_max = out.schedule.sigma_max
    std = np.sqrt(s / (1 - (s_max if s == 1 else s))) * a
    dt = s_next - s
    mean = x * (1 + std**2 / (2 * s) * dt) + v * (1 + std**2 * (1 - s) / (2 * s)) * dt
    sd = std * np.sqrt(-dt)
    closed = -((nxt - mean) ** 2) / (2 * sd**2) - np.log(sd) - 0.5 * np.log(2 * np.pi)
    closed = closed.mean(dim=tuple(range(1, closed.ndim)))
    torch.testing.assert_close(out.log_probs[:, 0].double(), closed, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("hub_id", "recipe"),
    [
        ("black-forest-labs/FLUX.2-klein-4B", "recipes/grpo_flux2_klein_t2is.yaml"),
        ("black-forest-labs/FLUX.2-dev", "recipes/grpo_flux2_t2is.yaml"),
    ],
)
def test_recipe_lora_targets_exist_in_the_real_transformer(hub_id, recipe):
    """Every LoRA target of the real-size recipe names Linear layers of the real transformer
    (built on the meta device from the shipped config)."""
    from paco_grpo.architectures import pipeline_configs
    from paco_reward.architectures import build_empty

    config = GRPOConfig.from_yaml(recipe)
    assert config.model_name_or_path == hub_id
    assert sorted(config.lora_target_modules) == sorted(FLUX2_LORA_TARGETS)
    transformer = build_empty(pipeline_configs(hub_id)["transformer"])
    linears = [n for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)]
    for target in config.lora_target_modules:
        assert any(n == target or n.endswith("." + target) for n in linears), target
    matched = [n for n in linears if any(n.endswith("." + t) for t in config.lora_target_modules)]
    # 12 projections in each double-stream block, 1 in each single-stream block: 80 LoRA
    # layers on klein-4B (5 + 20 blocks), 144 on FLUX.2-dev (8 + 48)
    double, single = transformer.config.num_layers, transformer.config.num_single_layers
    assert (
        len(matched) == 12 * double + single == {"flux2": 144, "flux2_klein": 80}[config.pipeline]
    )


def _config(model, out, **overrides) -> GRPOConfig:
    name, path, _ = model
    base = {"model_name_or_path": str(path), "pipeline": name, "output_dir": str(out),
            "report_to": []}  # fmt: skip
    base.update(overrides)
    return GRPOConfig.from_yaml(TINY_RECIPE, base)


def test_one_epoch_moves_every_lora_tensor_and_a_resumed_run_continues(model, tmp_path):
    from paco_grpo.grpo_trainer import GRPOTrainer

    trainer = GRPOTrainer(_config(model, tmp_path / "a"))
    before = [p.detach().clone() for p in trainer.params]
    history = trainer.train()
    assert [row["epoch"] for row in history] == [0, 1]
    assert all(np.isfinite(row["train/loss"]) for row in history)
    assert history[0]["train/ratio_first_update_max_dev"] < 1e-5  # on policy
    changed = [not torch.equal(a, b) for a, b in zip(before, trainer.params)]
    assert all(changed), f"{changed.count(False)} of {len(changed)} LoRA tensors never moved"

    checkpoint = tmp_path / "a" / "checkpoints" / "checkpoint-00001"
    resumed = GRPOTrainer(_config(model, tmp_path / "b", resume_from_checkpoint=str(checkpoint)))
    assert resumed.start_epoch == 1
    again = resumed.train()
    assert [row["epoch"] for row in again] == [1]
    for key, value in history[1].items():
        if not key.startswith("time/"):
            assert again[0][key] == value, key
    name = "pytorch_lora_weights.safetensors"
    a = load_file(tmp_path / "a" / "checkpoints" / "checkpoint-00002" / name)
    b = load_file(tmp_path / "b" / "checkpoints" / "checkpoint-00002" / name)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cli_builds_tiny_klein_and_trains_the_tiny_recipe(tmp_path, capsys):
    from paco_grpo.cli import main

    model_dir = tmp_path / "tiny_flux2_klein"
    assert main(["tiny-flux2", str(model_dir)]) == 0
    assert (model_dir / "model_index.json").is_file()
    out = tmp_path / "run"
    args = ["train", TINY_RECIPE, "--model_name_or_path", str(model_dir),
            "--output_dir", str(out), "--num_train_epochs", "1", "--report_to", "none"]  # fmt: skip
    assert main(args) == 0
    assert "epoch 0: reward/panel_colour_agreement/mean=" in capsys.readouterr().out
    assert (out / "checkpoints" / "checkpoint-00001" / "pytorch_lora_weights.safetensors").is_file()
