"""Recipes: strict YAML + CLI overrides; the 7B recipe builds the trainer on a tiny stand-in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from paco_reward.training.cli import load_recipe
from paco_reward.training.loading import build_trainer
from paco_reward.training.metrics import decision_metrics, roc_auc

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_7b_recipe_is_the_papers_configuration():
    # use_cpu: transformers refuses bf16 without a GPU at config time.
    cfg = load_recipe(RECIPES / "paco_reward_7b_lora.yaml", ["--use_cpu", "true"])
    assert cfg.model_name_or_path == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert (cfg.learning_rate, cfg.lr_scheduler_type.value, cfg.warmup_steps) == (
        2e-4,
        "cosine",
        0.1,
    )
    assert (cfg.num_train_epochs, cfg.per_device_train_batch_size) == (2, 8)
    assert (cfg.gradient_accumulation_steps, cfg.bf16, cfg.first_token_weight) == (4, True, 0.1)
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (32, 64, 0.0)
    assert cfg.image_max_pixels == 2_097_152 and cfg.freeze_vision_tower and cfg.freeze_merger


def test_7b_recipe_builds_the_trainer_on_a_tiny_stand_in(tmp_path, tiny_model_dir):
    cfg = load_recipe(
        RECIPES / "paco_reward_7b_lora.yaml",
        [
            "--model_name_or_path",
            str(tiny_model_dir),
            "--dataset_path",
            "toy-colour-pairs",
            "--toy_train_size",
            "8",
            "--toy_test_size",
            "4",
            "--output_dir",
            str(tmp_path / "run"),
            "--report_to",
            "none",
            "--dataloader_num_workers",
            "0",
            "--use_cpu",
            "true",
        ],
    )
    trainer = build_trainer(cfg)
    lora = trainer.model.peft_config["default"]
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (32, 64, 0.0)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("language_model" in n and "lora_" in n for n in trainable)
    for layer in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert any(f".{layer}.lora_A" in n for n in trainable), layer
    assert trainer.model.dtype == torch.bfloat16
    batch = trainer._prepare_inputs(
        trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    )
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch, num_items_in_batch=2)
    assert torch.isfinite(loss)


def test_tiny_recipe_and_overrides(tmp_path):
    cfg = load_recipe(
        RECIPES / "tiny_cpu.yaml", ["--max_steps", "7", "--first_token_weight", "0.5"]
    )
    assert cfg.max_steps == 7 and cfg.first_token_weight == 0.5 and cfg.reasoning_warmup_steps > 0
    assert cfg.tiny_model and not cfg.use_lora


def test_a_float_written_without_a_dot_is_a_float(tmp_path):
    # PyYAML (YAML 1.1) reads 5e-4 as the string "5e-4"; the recipe means the number.
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"output_dir: {tmp_path}\nlearning_rate: 5e-4\nadam_epsilon: 1e-6\n")
    assert yaml.safe_load(recipe.read_text())["learning_rate"] == "5e-4"
    cfg = load_recipe(recipe)
    assert cfg.learning_rate == 0.0005 and cfg.adam_epsilon == 1e-6
    recipe.write_text(f"output_dir: {tmp_path}\nlearning_rate: fast\n")
    with pytest.raises(ValueError, match="learning_rate must be a number; got 'fast'"):
        load_recipe(recipe)


def test_recipes_start_with_the_command_that_runs_them():
    mine = ["paco_reward_7b_lora.yaml", "tiny_cpu.yaml"]
    mine += [f"accelerate/sft_{name}.yaml" for name in ("zero2", "zero3", "fsdp")]
    for path in (RECIPES / name for name in mine):
        assert path.read_text().startswith("# "), path


def test_unknown_keys_fail(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"output_dir": str(tmp_path), "lora_rank": 8}))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['lora_rank'\]"):
        load_recipe(recipe)
    with pytest.raises(SystemExit) as usage:  # an unknown flag is a usage error
        load_recipe(RECIPES / "tiny_cpu.yaml", ["--nope", "1"])
    assert usage.value.code == 2
    with pytest.raises(ValueError, match="No recipe file at"):
        load_recipe(tmp_path / "missing.yaml")
    recipe.write_text("- a list\n")
    with pytest.raises(ValueError, match="must be a mapping"):
        load_recipe(recipe)


def test_train_and_merge_command_lines():
    from paco_reward.command_line import parse_config
    from paco_reward.training.cli import MergeArguments

    cfg = load_recipe(RECIPES / "tiny_cpu.yaml", ["--max_steps", "3", "--no_use_lora"])
    assert cfg.max_steps == 3 and cfg.use_lora is False
    args = parse_config(MergeArguments, ["base", "adapter", "out"])
    assert (args.base, args.adapter, args.output_dir, args.dtype) == (
        "base",
        "adapter",
        "out",
        None,
    )


def test_metrics_by_hand():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)
    assert roc_auc([0.2, 0.3], [1, 1]) != roc_auc([0.2, 0.3], [1, 1])  # NaN: one class
    m = decision_metrics([0.9, 0.6, 0.3, 0.7], [1, 1, 0, 0])
    assert m["score_accuracy"] == 0.75 and m["roc_auc"] == pytest.approx(0.75)
    assert m["p_yes_on_yes"] == pytest.approx(0.75) and m["p_yes_on_no"] == pytest.approx(0.5)


def test_accelerate_configs():
    stages = {}
    for name in ("zero2", "zero3", "fsdp"):
        config = yaml.safe_load((RECIPES / "accelerate" / f"sft_{name}.yaml").read_text())
        assert config["mixed_precision"] == "bf16"
        stages[name] = config.get("deepspeed_config", {}).get(
            "zero_stage", config["distributed_type"]
        )
    assert stages == {"zero2": 2, "zero3": 3, "fsdp": "FSDP"}


def test_roc_auc_matches_the_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, 40).astype(float)
    labels = rng.integers(0, 2, 40)
    pos, neg = scores[labels == 1], scores[labels == 0]
    expected = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert roc_auc(scores, labels) == pytest.approx(expected)
