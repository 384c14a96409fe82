"""SFT recipes: the commands in their comments load them (and the accelerate launches they
name are read as the recipe needs), the tiny CPU recipe trains, the 7B recipe builds its
trainer on a tiny stand-in; strict YAML, command-line overrides, one checkpointing name."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from paco_reward.command_line import parse_config
from paco_reward.errors import ConfigError
from paco_reward.training import PacoSFTConfig
from paco_reward.training.loading import build_trainer
from paco_reward.training.metrics import decision_metrics, roc_auc

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
SFT_RECIPES = sorted(p for p in RECIPES.glob("*.yaml") if not p.name.startswith("grpo_"))
SFT_LAUNCHES = sorted((RECIPES / "accelerate").glob("sft_*.yaml"))
SEVEN_B = RECIPES / "paco_reward_7b_lora.yaml"
# transformers refuses bf16 without a GPU at config time
ON_CPU = {"use_cpu": True}


def command_line(recipe: Path, flags: list[str]) -> PacoSFTConfig:
    """The config ``paco-reward train RECIPE FLAGS`` trains with."""
    return parse_config(PacoSFTConfig, [str(recipe), *flags], recipe=True)


def commented_commands(path: Path) -> list[tuple[Path, list[str], Path | None]]:
    """The ``paco-reward train RECIPE FLAGS`` commands in ``path``'s comments, as (recipe,
    flags, accelerate config of ``--config_file`` or None). Comment lines of flags alone
    that follow one are a variant of it: the same command with those flags added."""
    found: list[tuple[Path, list[str], Path | None]] = []
    variant = None
    for line in path.read_text().splitlines():
        text = line[1:].strip() if line.startswith("#") else ""
        if text.startswith("--") and found:
            if variant is None:
                recipe, flags, launch = found[-1]
                variant = (recipe, list(flags), launch)
                found.append(variant)
            variant[1].extend(shlex.split(text))
            continue
        variant = None
        if not any(f"{cli} train " in text for cli in ("paco-reward", "paco_reward.cli")):
            continue
        words = shlex.split(text)
        i = next(i for i, w in enumerate(words) if w == "train" and "reward" in words[i - 1])
        rest = words[i + 2 :]
        flags = rest[: rest.index("&&")] if "&&" in rest else rest
        launch = words[words.index("--config_file") + 1] if "--config_file" in words[:i] else None
        found.append((ROOT / words[i + 1], flags, ROOT / launch if launch else None))
    return found


def accelerate_launch_arguments(config: Path):
    """The arguments ``accelerate launch --config_file CONFIG`` runs with, as its launcher
    reads them (no process is started)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    args = launch_command_parser().parse_args(["--config_file", str(config), "script.py"])
    return _validate_launch_command(args)[0]


@pytest.mark.parametrize("path", SFT_RECIPES + SFT_LAUNCHES, ids=lambda p: p.name)
def test_the_commands_in_the_comments_load_their_recipe(path, tiny_model_dir):
    """Each command a recipe or an SFT accelerate config shows in its comments loads the
    recipe it names, with its flags; a recipe shows at least one that runs it. An accelerate
    config it launches is read by accelerate's launcher, with the recipe's precision, the
    ZeRO stage its name says, and FSDP wrap classes that the model has."""
    from accelerate.utils.dataclasses import get_module_class_from_name

    from paco_reward.architectures import build_empty, model_config

    found = commented_commands(path)
    assert found, f"{path.name}: no paco-reward train command in its comments"
    if path in SFT_RECIPES:
        assert any(recipe == path for recipe, _, _ in found), f"{path.name}: none runs it"
    for recipe, flags, launch in found:
        cfg = command_line(recipe, [*flags, "--use_cpu", "true"])
        if launch is None:
            continue
        args = accelerate_launch_arguments(launch)
        assert args.mixed_precision == ("bf16" if cfg.bf16 else "fp16" if cfg.fp16 else "no")
        if args.use_deepspeed:
            assert f"zero{args.zero_stage}" in launch.name, (launch.name, args.zero_stage)
        if args.use_fsdp:
            model = build_empty(model_config(tiny_model_dir))  # Qwen2.5-VL's classes
            for name in args.fsdp_transformer_layer_cls_to_wrap.split(","):
                assert get_module_class_from_name(model, name), name


@pytest.mark.slow
def test_the_tiny_recipe_trains_on_a_synthetic_export(tmp_path):
    """As its first line says: the data pipeline's synthetic export, then ``paco-reward
    train recipes/tiny_cpu.yaml`` (a smaller export, two steps: the first reasons-first)
    builds the tiny model from scratch, trains it, evaluates it and saves an evaluator."""
    from data_pipeline.pipeline import SyntheticConfig, run_synthetic
    from paco_reward import PacoReward
    from paco_reward.cli import main
    from paco_reward.training.callbacks import read_metrics
    from paco_reward.training.loading import load_pair_dataset_dict

    work = tmp_path / "synthetic"
    run_synthetic(work, SyntheticConfig(n_prompts=4, grids_per_prompt=2, layouts=["2x2"], seed=0))
    out = tmp_path / "run"
    code = main(
        ["train", str(RECIPES / "tiny_cpu.yaml"), "--dataset_path", str(work / "export"),
         "--model_name_or_path", str(tmp_path / "base"), "--output_dir", str(out),
         "--max_steps", "2", "--reasoning_warmup_steps", "1", "--logging_steps", "1",
         "--disable_tqdm", "true"]
    )  # fmt: skip
    assert code == 0
    assert (tmp_path / "base" / "config.json").is_file()  # built from scratch
    losses = [r["loss"] for r in read_metrics(out) if "loss" in r]
    assert len(losses) == 2 and np.isfinite(losses).all(), losses
    assert (out / "final_metrics.json").is_file() and (out / "README.md").is_file()
    test = load_pair_dataset_dict(work / "export")["test"]
    scores = PacoReward.from_pretrained(out).score_pairs(
        [(test[i]["image_a"], test[i]["image_b"], test[i]["prompt"] or None) for i in range(2)]
    )
    assert all(0.0 < s < 1.0 for s in scores), scores


def test_7b_recipe_builds_the_trainer_on_a_tiny_stand_in(tmp_path, tiny_model_dir):
    cfg = PacoSFTConfig.from_yaml(
        SEVEN_B,
        {"model_name_or_path": str(tiny_model_dir), "dataset_path": "toy-colour-pairs",
         "toy_train_size": 8, "toy_test_size": 4, "output_dir": str(tmp_path / "run"),
         "report_to": "none", "dataloader_num_workers": 0, **ON_CPU},
    )  # fmt: skip
    trainer = build_trainer(cfg)
    lora = trainer.model.peft_config["default"]
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (
        cfg.lora_r,
        cfg.lora_alpha,
        cfg.lora_dropout,
    )
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("language_model" in n and "lora_" in n for n in trainable)
    for layer in cfg.lora_target_modules:
        assert any(f".{layer}.lora_A" in n for n in trainable), layer
    assert trainer.model.dtype == torch.bfloat16  # dtype 'auto' follows bf16
    # the recipe's gradient_checkpointing is the field Trainer.train reads
    assert trainer.args.activation_checkpointing is True
    batch = trainer._prepare_inputs(
        trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    )
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch, num_items_in_batch=2)
    assert torch.isfinite(loss)


def test_flags_override_the_recipe_and_leave_the_rest():
    recipe = PacoSFTConfig.from_yaml(SEVEN_B, ON_CPU)
    flags = ["--no_use_lora", "--learning_rate", "1e-5", "--gradient_checkpointing", "false"]
    cfg = command_line(SEVEN_B, ["--use_cpu", "true", *flags, "--max_steps", "7"])
    assert recipe.use_lora and not cfg.use_lora
    assert cfg.learning_rate == 1e-5 != recipe.learning_rate
    assert recipe.activation_checkpointing and cfg.activation_checkpointing is False
    assert cfg.max_steps == 7
    changed = {"use_lora", "learning_rate", "max_steps"}
    changed |= {"gradient_checkpointing", "activation_checkpointing"}
    mine, theirs = cfg.to_dict(), recipe.to_dict()
    assert {k for k in mine if mine[k] != theirs[k]} == changed


def test_a_config_written_to_yaml_reloads_as_itself(tmp_path, caplog):
    """``to_yaml`` writes every field (never a hub token) and the library version; the file
    reloads with ``from_yaml`` as the same config, as GRPOConfig's does, and one written by
    another version says so."""
    import paco_reward

    overrides = {**ON_CPU, "max_steps": 7, "learning_rate": 5e-4, "hub_token": "hf_secret",
                 "gradient_checkpointing_kwargs": {"use_reentrant": False}, "eval_steps": 3}  # fmt: skip
    cfg = PacoSFTConfig.from_yaml(SEVEN_B, overrides)
    path = cfg.to_yaml(tmp_path / "training_config.yaml")
    text = path.read_text()
    assert "hf_secret" not in text
    assert yaml.safe_load(text)["paco_rl_version"] == paco_reward.__version__
    reloaded = PacoSFTConfig.from_yaml(path)
    assert reloaded.hub_token is None and reloaded.to_dict() == cfg.to_dict()
    assert reloaded == PacoSFTConfig.from_yaml(SEVEN_B, {**overrides, "hub_token": None})
    path.write_text(text.replace(f"paco_rl_version: {paco_reward.__version__}",
                                 "paco_rl_version: 0.0.1"))  # fmt: skip
    with caplog.at_level("WARNING", logger="paco_reward.yaml_config"):
        PacoSFTConfig.from_yaml(path)
    assert "written by paco-rl 0.0.1" in caplog.text


def test_checkpointing_has_one_name_and_accepts_transformers_one(tmp_path):
    base = f"output_dir: {tmp_path}\nuse_cpu: true\n"
    recipe = tmp_path / "r.yaml"
    for key in ("gradient_checkpointing", "activation_checkpointing"):
        recipe.write_text(base + f"{key}: true\n{key}_kwargs: {{use_reentrant: false}}\n")
        cfg = PacoSFTConfig.from_yaml(recipe)
        assert cfg.gradient_checkpointing and cfg.activation_checkpointing, key
        assert cfg.gradient_checkpointing_kwargs == cfg.activation_checkpointing_kwargs
        assert cfg.activation_checkpointing_kwargs == {"use_reentrant": False}
    recipe.write_text(base + "gradient_checkpointing: true\nactivation_checkpointing: false\n")
    with pytest.raises(
        ValueError, match="gradient_checkpointing=True and activation_checkpointing"
    ):
        PacoSFTConfig.from_yaml(recipe)


def test_a_float_written_without_a_dot_is_a_float(tmp_path):
    # PyYAML (YAML 1.1) reads 5e-4 as the string "5e-4"; the recipe means the number.
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"output_dir: {tmp_path}\nlearning_rate: 5e-4\nadam_epsilon: 1e-6\n")
    assert yaml.safe_load(recipe.read_text())["learning_rate"] == "5e-4"
    cfg = PacoSFTConfig.from_yaml(recipe)
    assert cfg.learning_rate == 0.0005 and cfg.adam_epsilon == 1e-6
    recipe.write_text(f"output_dir: {tmp_path}\nlearning_rate: fast\n")
    with pytest.raises(ConfigError, match="learning_rate must be a number; got 'fast'"):
        PacoSFTConfig.from_yaml(recipe)


def test_unknown_keys_fail(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"output_dir": str(tmp_path), "lora_rank": 8}))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lora_rank'\]"):
        PacoSFTConfig.from_yaml(recipe)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lora_rank'\]"):
        PacoSFTConfig.from_yaml(RECIPES / "tiny_cpu.yaml", {"lora_rank": 8})  # an override too
    with pytest.raises(SystemExit) as usage:  # an unknown flag is a usage error
        command_line(RECIPES / "tiny_cpu.yaml", ["--nope", "1"])
    assert usage.value.code == 2
    with pytest.raises(ConfigError, match="No recipe file at"):
        PacoSFTConfig.from_yaml(tmp_path / "missing.yaml")
    recipe.write_text("- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        PacoSFTConfig.from_yaml(recipe)


def test_merge_command_line():
    from paco_reward.cli import MergeArguments

    args = parse_config(MergeArguments, ["base", "adapter", "out", "--revision", "v1"])
    assert (args.model, args.adapter, args.output_dir, args.dtype, args.revision) == (
        "base",
        "adapter",
        "out",
        None,
        "v1",
    )


def test_metrics_by_hand():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)
    assert roc_auc([0.2, 0.3], [1, 1]) != roc_auc([0.2, 0.3], [1, 1])  # NaN: one class
    m = decision_metrics([0.9, 0.6, 0.3, 0.7], [1, 1, 0, 0])
    assert m["score_accuracy"] == 0.75 and m["roc_auc"] == pytest.approx(0.75)
    assert m["p_yes_on_yes"] == pytest.approx(0.75) and m["p_yes_on_no"] == pytest.approx(0.5)


def test_roc_auc_matches_the_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, 40).astype(float)
    labels = rng.integers(0, 2, 40)
    pos, neg = scores[labels == 1], scores[labels == 0]
    expected = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert roc_auc(scores, labels) == pytest.approx(expected)
