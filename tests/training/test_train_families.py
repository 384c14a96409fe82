"""LoRA SFT on each Qwen-VL family (Qwen2.5-VL, Qwen3-VL): the loss falls, every trainable
parameter changes (the language model's and vision tower's LoRA, the mergers: Qwen3-VL's
DeepStack ones too) and nothing else does; the adapter merges into a model that scores as
base + adapter."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from paco_reward import PacoReward
from paco_reward.training import PacoSFTConfig
from paco_reward.training.callbacks import read_metrics
from paco_reward.training.loading import build_trainer
from paco_reward.training.merge import merge_lora
from paco_reward.training.toy import colour_pairs

STEPS = 4


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def lora_run(request, tmp_path_factory):
    """A few LoRA steps on one batch of four toy pairs (vision tower and mergers trained too):
    the run folder, its model folder, and the parameters before and after."""
    from tests.conftest import FAMILY_FIXTURES

    model_dir = request.getfixturevalue(FAMILY_FIXTURES[request.param])
    out = tmp_path_factory.mktemp(f"lora-{request.param}") / "run"
    cfg = PacoSFTConfig(
        output_dir=str(out),
        model_name_or_path=str(model_dir),
        dataset_path="toy-colour-pairs",
        toy_train_size=4,
        eval_split="",
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        max_steps=STEPS,
        logging_steps=1,
        lora_r=4,
        lora_alpha=8,
        freeze_vision_tower=False,
        freeze_merger=False,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = build_trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    trainer.save_model(str(out))
    after = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return {
        "family": request.param,
        "out": out,
        "model_dir": model_dir,
        "before": before,
        "after": after,
        "trainable": trainable,
    }


def test_lora_sft_learns_and_changes_every_trainable_parameter(lora_run):
    losses = [r["loss"] for r in read_metrics(lora_run["out"]) if "loss" in r]
    assert len(losses) == STEPS and np.isfinite(losses).all(), losses
    assert losses[-1] < losses[0], losses

    trainable = lora_run["trainable"]
    kinds = {
        "language model LoRA": lambda n: "language_model" in n and "lora_" in n,
        "vision LoRA": lambda n: "visual.blocks" in n and "lora_" in n,
        "merger": lambda n: "visual.merger" in n and "modules_to_save" in n,
    }
    if lora_run["family"] == "qwen3_vl":
        kinds["DeepStack mergers"] = lambda n: (
            "deepstack_merger_list" in n and "modules_to_save" in n
        )
    for kind, is_kind in kinds.items():
        assert any(is_kind(n) for n in trainable), kind
    before, after = lora_run["before"], lora_run["after"]
    for name in before:
        changed = not torch.equal(before[name], after[name])
        assert changed == (name in trainable), name


def test_the_merged_model_scores_like_base_plus_adapter(lora_run, tmp_path):
    out, model_dir = lora_run["out"], lora_run["model_dir"]
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["modules_to_save"]  # the mergers travel with the adapter
    merged_dir = merge_lora(model_dir, out, tmp_path / "merged")
    pairs = [(row["image_a"], row["image_b"], None) for row in colour_pairs(4, seed=11)]
    with_adapter = PacoReward.from_pretrained(model_dir, adapter=out, template="rank")
    merged = PacoReward.from_pretrained(merged_dir, template="rank")
    base = PacoReward.from_pretrained(model_dir, template="rank")
    a, m, b = (rm.score_pairs(pairs) for rm in (with_adapter, merged, base))
    np.testing.assert_allclose(m, a, atol=1e-5)
    assert np.abs(a - b).max() > 1e-3  # the adapter really changed the scorer
    assert type(merged.backend.model) is type(base.backend.model)
