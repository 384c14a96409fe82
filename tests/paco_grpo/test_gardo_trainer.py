"""GARDO's options in the trainer on the tiny FLUX (one process): the reference adapter is
a copy of the policy at start and after a reset, the gate and the diversity-aware
advantage run and are logged, and each option works alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from paco_grpo.gardo import diversity_advantages
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.policy import POLICY_ADAPTER, REFERENCE_ADAPTER, adapter_params
from paco_grpo.rewards.base import BaseReward
from paco_grpo.rewards.colour import PanelColourAgreementReward
from paco_grpo.testing.features import build_tiny_dinov3
from paco_grpo.testing.flux import build_tiny_flux
from paco_reward.errors import ConfigError

RECIPE = "recipes/grpo_tiny_cpu.yaml"


class Brightness(BaseReward):
    """An auxiliary judge that disagrees with colour agreement: the mean pixel value."""

    name = "brightness"

    def score(self, images, prompts, metadata) -> np.ndarray:
        return np.array([float(im.float().mean()) for im in images])


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)


@pytest.fixture(scope="module")
def dino_dir(tmp_path_factory):
    return build_tiny_dinov3(tmp_path_factory.mktemp("tiny-dino") / "dino")


def _config(flux_dir, out, **overrides) -> GRPOConfig:
    base = {"model_name_or_path": str(flux_dir), "output_dir": str(out), "report_to": [],
            "num_train_epochs": 2, "num_iterations": 2, "prompts_per_epoch": 2,
            "num_generations": 8, "sample_batch_size": 16, "per_device_train_batch_size": 8,
            "test.eval_epochs": 0, "num_sample_images": 0, "save_epochs": 0}  # fmt: skip
    base.update(overrides)
    return GRPOConfig.from_yaml(RECIPE, base)


def _rewards():
    return {"panel_colour_agreement": PanelColourAgreementReward(), "brightness": Brightness()}


def _adapter(trainer, name):
    return {k: p.detach().clone() for k, p in adapter_params(trainer.transformer, name).items()}


def test_all_gardo_options_together(flux_dir, dino_dir, tmp_path):
    cfg = _config(
        flux_dir, tmp_path,
        rewards={"panel_colour_agreement": 1.0, "brightness": 0.0},
        beta=0.05, kl_reference="adapter", reference_reset_kl=1e-12,
        kl_gate_rewards=["brightness"], kl_gate_kappa=0.2,
        feature_model=str(dino_dir), diversity_advantage=True,
    )  # fmt: skip
    trainer = GRPOTrainer(cfg, rewards=_rewards())
    policy, reference = _adapter(trainer, POLICY_ADAPTER), _adapter(trainer, REFERENCE_ADAPTER)
    assert set(policy) == set(reference)
    assert all(torch.equal(policy[k], reference[k]) for k in policy)  # a copy at start
    # only the policy's adapter trains
    trainable = {n for n, p in trainer.transformer.named_parameters() if p.requires_grad}
    assert trainable and not any(f".{REFERENCE_ADAPTER}." in n for n in trainable)

    first = trainer.run_epoch(0)
    assert first["gardo/reference_reset"] == 0  # epoch 0: the reference was just copied
    after_0 = _adapter(trainer, POLICY_ADAPTER)
    assert not all(torch.equal(after_0[k], policy[k]) for k in policy)  # the policy moved
    second = trainer.run_epoch(1)  # a step's KL > 1e-12 marked a reset: done before training
    assert second["gardo/reference_reset"] == 1 and trainer.gardo.rule.resets == [1]
    reference_1 = _adapter(trainer, REFERENCE_ADAPTER)
    assert all(torch.equal(reference_1[k], after_0[k]) for k in after_0)
    for row in (first, second):
        assert 0 < row["gardo/gated_fraction"] <= 0.25 and row["gardo/kappa"] > 0
        assert np.isfinite(row["train/kl_gated"]) and np.isfinite(row["hacking/diversity/mean"])
        assert abs(row["hacking/advantage_max"]) <= cfg.adv_clip_max
    assert first["train/kl"] > 0  # the second pass moved away from the copied reference


def test_diversity_advantage_alone_is_what_the_trainer_trains_on(flux_dir, dino_dir, tmp_path):
    cfg = _config(flux_dir, tmp_path, num_train_epochs=1, feature_model=str(dino_dir),
                  diversity_advantage=True)  # fmt: skip
    trainer = GRPOTrainer(cfg)
    seen = {}
    train_epoch = trainer.train_epoch

    def spy(samples, advantages, epoch, kl_gate=None):
        seen["advantages"], seen["gate"] = advantages, kl_gate
        return train_epoch(samples, advantages, epoch, kl_gate)

    trainer.train_epoch = spy
    rollout_epoch = trainer.sample_epoch
    kept = {}

    def keep(epoch):
        kept["rollout"] = out = rollout_epoch(epoch)
        return out

    trainer.sample_epoch = keep
    trainer.run_epoch(0)
    rollout = kept["rollout"]
    keys = [trainer.group_key(trainer.items[i]) for i in rollout.group_ids]
    expected = diversity_advantages(rollout.rewards["panel_colour_agreement"], keys,
                                    rollout.features, cfg.adv_clip_max)  # fmt: skip
    np.testing.assert_allclose(seen["advantages"], expected, rtol=1e-12)
    assert seen["gate"] is None and trainer.gardo is None


def test_gardo_options_are_checked_at_start_up(flux_dir, tmp_path):
    with pytest.raises(ConfigError, match="needs image features"):
        _config(flux_dir, tmp_path, diversity_advantage=True)
    with pytest.raises(ConfigError, match="weight 0"):
        _config(flux_dir, tmp_path, rewards={"panel_colour_agreement": 1.0, "brightness": 0.5},
                kl_gate_rewards=["brightness"], beta=0.1)  # fmt: skip
    with pytest.raises(ConfigError, match="not in rewards"):
        _config(flux_dir, tmp_path, kl_gate_rewards=["brightness"], beta=0.1)
    with pytest.raises(ConfigError, match="beta > 0"):
        _config(flux_dir, tmp_path, kl_reference="adapter")
    with pytest.raises(ConfigError, match="kl_reference must be one of"):
        _config(flux_dir, tmp_path, kl_reference="ema")
