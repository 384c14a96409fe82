"""GRPOTrainer on the tiny FLUX: learning, on-policy ratio, resume, EMA eval, logs, checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from paco_grpo import RewardFailureError
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer, grpo_loss
from paco_grpo.testing.flux import build_tiny_flux
from paco_reward.errors import ConfigError, OutputDirInUseError

RECIPE = "recipes/grpo_tiny_cpu.yaml"
REWARD = "reward/panel_colour_agreement/mean"


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)


def _config(flux_dir, out, **overrides) -> GRPOConfig:
    base = {"model_name_or_path": str(flux_dir), "output_dir": str(out), "report_to": []}
    base.update(overrides)
    return GRPOConfig.from_yaml(RECIPE, base)


def test_grpo_loss_closed_form():
    old = torch.zeros(4)
    log_prob = torch.log(torch.tensor([1.5, 0.5, 1.5, 0.5]))  # ratios 1.5, 0.5, 1.5, 0.5
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    mean, ref, std = torch.ones(4, 2, 3), torch.zeros(4, 2, 3), torch.full((4, 1, 1), 0.5)
    out = grpo_loss(log_prob, old, adv, mean, ref, std, epsilon=0.2, beta=0.1)
    # max(-A r, -A clip(r)): A>0 -> -min(r, clip) = -1.2, -0.5; A<0 -> max(r, clip) = 1.5, 0.8
    expected_policy = np.mean([-1.2, -0.5, 1.5, 0.8])
    assert float(out["policy_loss"]) == pytest.approx(expected_policy)
    np.testing.assert_allclose(out["kl"].numpy(), [2.0] * 4)  # 1 / (2 * 0.25)
    assert float(out["loss"]) == pytest.approx(expected_policy + 0.1 * 2.0)
    assert out["clip_fraction"].tolist() == [1.0, 1.0, 1.0, 1.0]
    # gradient flows only through unclipped terms
    lp = log_prob.clone().requires_grad_(True)
    grpo_loss(lp, old, adv, mean, ref, std, 0.2, 0.0)["loss"].backward()
    np.testing.assert_allclose(lp.grad.numpy(), [0.0, -0.5 / 4, 1.5 / 4, 0.0], atol=1e-7)


@pytest.mark.slow
def test_tiny_recipe_learns_panel_colour_agreement(flux_dir, tmp_path):
    cfg = _config(
        flux_dir, tmp_path, **{"test.eval_epochs": 0, "num_sample_images": 0, "save_epochs": 0}
    )
    trainer = GRPOTrainer(cfg)
    before = [p.detach().clone() for p in trainer.params]
    history = trainer.train()
    rewards = [row[REWARD] for row in history]
    assert len(rewards) == cfg.num_train_epochs
    first, last = np.mean(rewards[:2]), np.mean(rewards[-3:])
    # reward std within an epoch is ~0.02, the standard error of an epoch mean ~0.003
    assert last - first > 0.015, rewards
    assert all(np.isfinite(row["train/loss"]) for row in history)
    changed = [not torch.equal(a, b) for a, b in zip(before, trainer.params)]
    assert all(changed), f"{changed.count(False)} of {len(changed)} LoRA tensors never moved"


def test_first_update_is_on_policy_and_metrics_are_logged(flux_dir, tmp_path):
    cfg = _config(
        flux_dir,
        tmp_path,
        **{
            "num_train_epochs": 1,
            "test.eval_epochs": 1,
            "test.num_prompts": 3,
            "per_device_eval_batch_size": 2,
            "report_to": ["tensorboard"],
            "num_iterations": 1,
            "per_device_train_batch_size": 8,
        },
    )
    history = GRPOTrainer(cfg).train()
    row = history[0]
    assert row["train/ratio_first_update_max_dev"] < 1e-5
    assert row["train/ratio_first_update"] == pytest.approx(1.0, abs=1e-6)
    for key in (
        "reward/panel_colour_agreement/std",
        "advantages/std",
        "train/clip_fraction",
        "group_std/mean",
        "group_std/zero_fraction",
        "time/sampling",
        "time/reward",
        "time/training",
        "train/resolution",
        "eval/resolution",
    ):
        assert key in row and np.isfinite(row[key]), key
    assert "train/kl" not in row  # beta = 0: the frozen base is not run (log_kl=True logs it)
    # evaluation: 3 prompts in batches of 2 over 1 process -> 3 images, no padded duplicate
    assert row["eval/num_images"] == 3 and row["eval/resolution"] == 64
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["epoch"] == 1
    assert (tmp_path / "reward_curve.png").stat().st_size > 1000
    assert list((tmp_path / "paco-grpo").glob("events.*"))
    assert (tmp_path / "samples" / "train_epoch_00001.png").is_file()
    assert (tmp_path / "samples" / "eval_epoch_00001.png").is_file()
    ckpt = tmp_path / "checkpoints" / "checkpoint-00001"
    for name in ("pytorch_lora_weights.safetensors", "trainer_state.json", "optimizer.bin",
                 "scheduler.bin", "random_states_0.pkl", "ema_shadow_params.safetensors"):  # fmt: skip
        assert (ckpt / name).is_file(), name


def test_resume_is_bit_for_bit_and_keeps_last_checkpoints(flux_dir, tmp_path):
    common = {
        "num_train_epochs": 3,
        "save_epochs": 1,
        "save_total_limit": 2,
        "test.eval_epochs": 0,
        "num_iterations": 1,
        "num_sample_images": 0,
    }
    straight = GRPOTrainer(_config(flux_dir, tmp_path / "a", **common)).train()
    kept = sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir())
    assert kept == ["checkpoint-00002", "checkpoint-00003"]

    resumed_trainer = GRPOTrainer(
        _config(
            flux_dir,
            tmp_path / "b",
            resume_from_checkpoint=str(tmp_path / "a" / "checkpoints" / "checkpoint-00002"),
            **common,
        )
    )
    assert resumed_trainer.start_epoch == 2
    resumed = resumed_trainer.train()
    assert [r["epoch"] for r in resumed] == [3]
    for key, value in straight[2].items():
        if not key.startswith("time/"):
            assert resumed[0][key] == value, key
    a = load_file(
        tmp_path / "a" / "checkpoints" / "checkpoint-00003" / "pytorch_lora_weights.safetensors"
    )
    b = load_file(
        tmp_path / "b" / "checkpoints" / "checkpoint-00003" / "pytorch_lora_weights.safetensors"
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ema_a = load_file(
        tmp_path / "a" / "checkpoints" / "checkpoint-00003" / "ema_shadow_params.safetensors"
    )
    ema_b = load_file(
        tmp_path / "b" / "checkpoints" / "checkpoint-00003" / "ema_shadow_params.safetensors"
    )
    assert ema_a.keys() == ema_b.keys() and all(torch.equal(ema_a[k], ema_b[k]) for k in ema_a)


def test_checkpoint_lora_loads_into_flux_pipeline(flux_dir, tmp_path):
    from diffusers import FluxPipeline

    trainer = GRPOTrainer(
        _config(
            flux_dir,
            tmp_path,
            **{"num_train_epochs": 1, "test.eval_epochs": 0, "num_iterations": 1},
        )
    )
    trainer.train()
    pipe = FluxPipeline.from_pretrained(flux_dir)
    pipe.load_lora_weights(tmp_path / "checkpoints" / "checkpoint-00001")
    ours = {k: v for k, v in trainer.transformer.state_dict().items() if "lora" in k}
    theirs = {k: v for k, v in pipe.transformer.state_dict().items() if "lora" in k}
    assert len(ours) == len(theirs) > 0
    for (ka, va), (kb, vb) in zip(sorted(ours.items()), sorted(theirs.items())):
        assert torch.equal(va, vb), (ka, kb)


def test_resume_latest_without_checkpoint_fails(flux_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        GRPOTrainer(_config(flux_dir, tmp_path, resume_from_checkpoint="latest"))
    with pytest.raises(FileNotFoundError, match="is not a checkpoint folder"):
        GRPOTrainer(_config(flux_dir, tmp_path, resume_from_checkpoint=str(tmp_path)))


def test_a_reused_output_dir_is_refused_unless_resumed_overwritten_or_the_same_run(
    flux_dir, tmp_path
):
    common = {"save_epochs": 1, "save_total_limit": 2, "test.eval_epochs": 0,
              "num_iterations": 1, "num_sample_images": 0}  # fmt: skip
    first = GRPOTrainer(_config(flux_dir, tmp_path, num_train_epochs=2, **common))
    first.train()
    checkpoints = tmp_path / "checkpoints"
    kept = ["checkpoint-00001", "checkpoint-00002"]

    def rows() -> list[int]:
        lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line)["epoch"] for line in lines]

    # another run (other epochs) into the folder: refused before anything loads, nothing lost
    with pytest.raises(OutputDirInUseError, match=rf"{tmp_path}.*--overwrite_output_dir true"):
        GRPOTrainer(_config(flux_dir, tmp_path, num_train_epochs=1, **common))
    assert sorted(p.name for p in checkpoints.iterdir()) == kept and rows() == [1, 2]

    # resuming it: latest is the first run's newest checkpoint, and its metrics continue
    resumed = GRPOTrainer(
        _config(flux_dir, tmp_path, num_train_epochs=3, resume_from_checkpoint="latest", **common)
    )
    assert resumed.start_epoch == 2
    resumed.train()
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-00002", "checkpoint-00003"]
    assert rows() == [1, 2, 3]

    # the same config started again: allowed, and its metrics are its own
    again = GRPOTrainer(_config(flux_dir, tmp_path, num_train_epochs=3, **common))
    assert again.start_epoch == 0 and not again.history
    again.train()
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-00002", "checkpoint-00003"]
    assert rows() == [1, 2, 3]

    # overwrite_output_dir: the earlier outputs are deleted, the new run's alone remain
    GRPOTrainer(
        _config(flux_dir, tmp_path, num_train_epochs=1, overwrite_output_dir=True, **common)
    ).train()
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-00001"] and rows() == [1]


def test_trainer_rejects_bad_setup(flux_dir, tmp_path):
    # one target right, two wrong: each wrong one is named, with the names closest to it
    targets = ["attn.to_q", "ff.net.0.projj", "nonexistent_proj"]
    with pytest.raises(ConfigError, match=(
        r"lora_target_modules \['ff.net.0.projj', 'nonexistent_proj'\] match no module of the "
        r"FluxTransformer2DModel: 'ff.net.0.projj' \(closest: \['ff.net.0.proj'"
    )):  # fmt: skip
        GRPOTrainer(_config(flux_dir, tmp_path, lora_target_modules=targets))
    with pytest.raises(ValueError, match="but no such reward was passed"):
        GRPOTrainer(_config(flux_dir, tmp_path), rewards={})


class _FlakyReward:
    """Panel-colour agreement, but the first image of every call fails (NaN)."""

    def __init__(self):
        from paco_grpo.rewards import PanelColourAgreementReward

        self.inner = PanelColourAgreementReward()

    def __call__(self, images, prompts, metadata):
        scores = self.inner(images, prompts, metadata)
        scores[0] = np.nan
        return scores


def test_item_resolutions_and_failed_rewards(flux_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    rows = [
        {"idx": "a", "prompt": "a 2x2 grid of foxes", "layout": "2x2", "height": 32, "width": 32},
        {"idx": "b", "prompt": "a 2x2 grid of birds", "layout": "2x2", "height": 64, "width": 32},
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _config(
        flux_dir,
        tmp_path / "out",
        **{
            "prompt_file": str(prompts),
            "item_resolution_overrides": True,
            "num_train_epochs": 1,
            "prompts_per_epoch": 2,
            "num_generations": 4,
            "sample_batch_size": 8,
            "per_device_train_batch_size": 8,
            "num_iterations": 1,
            "test.eval_epochs": 0,
            "max_failed_fraction": 0.25,  # 2 of 8 samples fail: within it
        },
    )
    trainer = GRPOTrainer(cfg, rewards={"panel_colour_agreement": _FlakyReward()})
    rollout = trainer.sample_epoch(0)
    samples, rewards = rollout.samples, rollout.rewards
    sizes = sorted({s["size"] for s in samples})
    assert sizes == [(32, 32), (64, 32)]
    assert {s["latents"].shape[1] for s in samples} == {4, 8}  # packed tokens per size
    # one failed image per sampling call (one call per size here)
    assert int(np.isnan(rewards["panel_colour_agreement"]).sum()) == 2
    row = trainer.run_epoch(0)
    assert row["reward/num_failed"] == 2 and np.isfinite(row["train/loss"])
    # over a budget of 0.2, the next epoch stops before its first optimizer step (a plain
    # callable records no reason, and the message says so)
    trainer.config.max_failed_fraction = 0.2
    steps = trainer.global_step
    with pytest.raises(
        RewardFailureError, match=r"(?s)2 of 8 samples of epoch 2 \(25%.*gave no reason"
    ):
        trainer.run_epoch(1)
    assert trainer.global_step == steps
    assert all(
        len(b) and len({samples[i]["size"] for i in b}) == 1
        for b in trainer.rollout.minibatches(samples, 0, 0)
    )


@pytest.mark.slow
def test_two_processes_gather_rewards_and_eval_without_duplicates(flux_dir, tmp_path):
    """torchrun + gloo on CPU: rewards gathered for the advantages, 3 eval prompts over 2
    processes give 3 images (gather_for_metrics drops the padded duplicate)."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "true",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.getcwd(),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "-m",
        "paco_grpo.cli",
        "train",
        RECIPE,
        "--model_name_or_path",
        str(flux_dir),
        "--output_dir",
        str(tmp_path),
        "--num_train_epochs",
        "1",
        "--test.eval_epochs",
        "1",
        "--test.num_prompts",
        "3",
        "--per_device_eval_batch_size",
        "1",
        "--num_iterations",
        "1",
        "--report_to",
        "none",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert row["eval/num_images"] == 3
    assert row["train/ratio_first_update_max_dev"] < 1e-5
    assert proc.stdout.count("epoch 1: reward/panel_colour_agreement/mean=") == 1


def test_evaluation_uses_ema_weights_and_restores_training_weights(flux_dir, tmp_path):
    cfg = _config(
        flux_dir,
        tmp_path,
        **{
            "num_train_epochs": 1,
            "test.eval_epochs": 0,
            "num_iterations": 2,
            "ema_decay": 0.5,
            "test.num_prompts": 2,
            "per_device_eval_batch_size": 2,
            "num_sample_images": 0,
        },
    )
    trainer = GRPOTrainer(cfg)
    trainer.train()
    trained = [p.detach().clone() for p in trainer.params]
    assert any(not torch.equal(s, p) for s, p in zip(trainer.ema.shadow_params, trained))
    with_ema = trainer.evaluate(0)
    assert all(torch.equal(p, q) for p, q in zip(trainer.params, trained))  # restored
    # the same evaluation with the EMA weights copied in by hand and EMA switched off
    trainer.ema.copy_to(trainer.params)
    trainer.ema = None
    by_hand = trainer.evaluate(0)
    assert (
        with_ema["eval/reward/panel_colour_agreement/mean"]
        == by_hand["eval/reward/panel_colour_agreement/mean"]
    )
    for p, q in zip(trainer.params, trained):
        p.data.copy_(q)
    raw = trainer.evaluate(0)
    assert (
        raw["eval/reward/panel_colour_agreement/mean"]
        != with_ema["eval/reward/panel_colour_agreement/mean"]
    )


def test_beta_zero_skips_the_reference_and_log_kl_logs_it_with_the_same_losses(flux_dir, tmp_path):
    """The frozen base runs only when asked: the losses are the same with and without it."""
    common = {"num_train_epochs": 1, "test.eval_epochs": 0, "num_sample_images": 0, "save_epochs": 0,
              "num_iterations": 1}  # fmt: skip
    plain = GRPOTrainer(_config(flux_dir, tmp_path / "a", **common)).run_epoch(0)
    logged = GRPOTrainer(_config(flux_dir, tmp_path / "b", log_kl=True, **common)).run_epoch(0)
    assert "train/kl" not in plain and logged["train/kl"] >= 0.0
    for key in ("train/loss", "train/policy_loss", "train/ratio", "train/lr_per_step"):
        assert plain[key] == logged[key], key


@pytest.mark.parametrize("cps_log_prob", ["gaussian", "released"])
def test_one_epoch_with_cps_sampling_updates_the_lora(flux_dir, tmp_path, cps_log_prob):
    """train.sde_type: cps samples and re-scores with the CPS step: on policy at the first
    update, a finite loss, and every LoRA tensor moves."""
    cfg = _config(flux_dir, tmp_path, **{"num_train_epochs": 1, "test.eval_epochs": 0,
                  "num_sample_images": 0, "save_epochs": 0, "num_iterations": 1,
                  "train.sde_type": "cps", "train.cps_log_prob": cps_log_prob})  # fmt: skip
    trainer = GRPOTrainer(cfg)
    assert trainer.rollout.scheduler.sde_type == "cps"
    before = [p.detach().clone() for p in trainer.params]
    row = trainer.run_epoch(0)
    assert row["train/ratio_first_update_max_dev"] < 1e-5
    assert np.isfinite(row["train/loss"]) and np.isfinite(row["train/policy_loss"])
    changed = [not torch.equal(a, b) for a, b in zip(before, trainer.params)]
    assert all(changed), f"{changed.count(False)} of {len(changed)} LoRA tensors never moved"


def test_the_policy_alone_runs_without_cudnn_attention():
    """On a GPU ``add_lora`` wraps the policy's transformer: its calls and, with gradient
    checkpointing, the forward its backward recomputes run without PyTorch's cuDNN attention
    (whose backward fails at FLUX.1-dev's size); the flag is back outside them, for the rest
    of the process (an in-process evaluator), an error inside included."""
    from paco_grpo.policy import without_cudnn_attention

    seen = []

    class Probe(torch.nn.Module):
        def __init__(self, fail: bool = False):
            super().__init__()
            self.linear, self.fail = torch.nn.Linear(2, 2), fail

        def forward(self, x):
            seen.append(torch.backends.cuda.cudnn_sdp_enabled())
            if self.fail:
                raise RuntimeError("inside")
            return self.linear(x)

    assert torch.backends.cuda.cudnn_sdp_enabled()
    x = torch.ones(1, 2, requires_grad=True)
    without_cudnn_attention(Probe())(x)
    assert seen == [False] and torch.backends.cuda.cudnn_sdp_enabled()
    out = without_cudnn_attention.checkpoint(Probe(), x)
    seen.clear()
    out.sum().backward()  # the recomputation
    assert seen == [False] and torch.backends.cuda.cudnn_sdp_enabled()
    with pytest.raises(RuntimeError, match="inside"):
        without_cudnn_attention(Probe(fail=True))(x)
    assert torch.backends.cuda.cudnn_sdp_enabled()
