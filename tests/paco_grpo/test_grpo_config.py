"""GRPOConfig: every runnable recipe loads as its first line runs it, overrides apply,
unknown keys and every validation path raise naming the key or value."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
import yaml

from paco_grpo.cli import COMMANDS, TinyArguments, main, tiny_command_name
from paco_grpo.grpo_config import EvalSection, GRPOConfig, TrainSection
from paco_grpo.pipelines import PIPELINE_SPECS
from paco_reward.command_line import parse_config
from paco_reward.errors import ConfigError

BASE = {
    "model_name_or_path": "m",
    "prompt_file": "p.txt",
    "rewards": {"panel_colour_agreement": 1.0},
}
# The recipes a user runs as shipped: their first line is the command that does.
RUNNABLE = sorted(
    str(p)
    for p in Path("recipes").glob("grpo_*.yaml")
    if "paco-grpo train " in p.read_text().splitlines()[0]
)
# The command that builds each registered pipeline's tiny model -> the pipeline.
BUILDERS = {tiny_command_name(name): name for name in PIPELINE_SPECS}
# The tiny reward models a recipe reads with: builder command -> the reward reading it.
REWARD_BUILDERS = {"tiny-ocr": "ocr"}


def first_line_commands(recipe: str) -> tuple[list[list[str]], list[str], list[list[str]]]:
    """From a recipe's comments: the ``paco-grpo tiny-* ...`` commands its first line runs
    before training, the flags of its ``paco-grpo train`` command, and the flag sets of the
    comment lines that hold only flags (variants of that command)."""
    lines = Path(recipe).read_text().splitlines()
    first = lines[0].lstrip("# ").split("(")[0]  # a parenthesis starts a remark
    *before, train = [shlex.split(part) for part in first.split("&&")]
    assert train[:3] == ["paco-grpo", "train", recipe], f"{recipe}: first line runs {train}"
    builds = [command[1:] for command in before]
    variants = [shlex.split(line.lstrip("# ")) for line in lines if line.startswith("#   --")]
    return builds, train[3:], variants


def test_some_recipes_are_runnable_as_shipped():
    assert len(RUNNABLE) >= 4, RUNNABLE  # the paper's, the editing ones, the tiny CPU ones


@pytest.mark.parametrize("recipe", RUNNABLE)
def test_each_recipe_loads_as_its_first_line_runs_it(recipe):
    """The first line's ``paco-grpo train`` command parses into a config; the tiny
    pipeline it builds first is the recipe's model, of the recipe's pipeline type, and a tiny
    reward model it builds is the one its reward reads with; each variant its comments give
    (flags alone on a line) parses too."""
    builds, flags, variants = first_line_commands(recipe)
    cfg = parse_config(GRPOConfig, [recipe, *flags], recipe=True)
    if not flags:  # the command line loads what the Python loader does
        assert cfg == GRPOConfig.from_yaml(recipe)
    if builds:
        args = parse_config(TinyArguments, builds[0][1:])
        assert args.output_dir == cfg.model_name_or_path
        assert BUILDERS[builds[0][0]] == cfg.pipeline
    for build in builds[1:]:
        model = parse_config(TinyArguments, build[1:]).output_dir
        assert model == cfg.reward_kwargs[REWARD_BUILDERS[build[0]]]["model"]
    for variant in variants:
        parse_config(GRPOConfig, [recipe, *flags, *variant], recipe=True)


def test_an_override_of_a_section_key_keeps_the_rest_of_the_recipe():
    recipe = GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml")
    cfg = GRPOConfig.from_yaml(
        "recipes/grpo_flux_t2is.yaml", {"train.resolution": 256, "num_train_epochs": 2}
    )
    assert cfg.train == dataclasses.replace(recipe.train, resolution=256)
    assert cfg == dataclasses.replace(recipe, train=cfg.train, num_train_epochs=2)
    assert cfg.num_train_epochs == 2 != recipe.num_train_epochs


def test_every_field_has_help():
    for cls in (GRPOConfig, TrainSection, EvalSection):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name}"


def test_unknown_keys_fail(tmp_path):
    """An unknown key, a misspelling or a name this config does not use, fails naming it
    and its closest valid key (a section's valid keys listed when they are few)."""
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lerning_rate'\]"):
        GRPOConfig.from_dict({**BASE, "lerning_rate": 1.0})
    closest = r"\['max_epochs'\] for GRPOConfig \(did you mean .*'num_train_epochs'\?\); \d+ valid"
    with pytest.raises(ConfigError, match=closest):
        GRPOConfig.from_dict({**BASE, "max_epochs": 1})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['train.resolutoin'\]"):
        GRPOConfig.from_dict({**BASE, "train": {"resolutoin": 512}})
    with pytest.raises(ConfigError, match=r"\['test.batch_size'\] for EvalSection; valid keys"):
        GRPOConfig.from_dict({**BASE, "test": {"batch_size": 2}})
    recipe = tmp_path / "r.yaml"
    recipe.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping of config fields"):
        GRPOConfig.from_yaml(recipe)
    with pytest.raises(ConfigError, match="'num_train_epochs' is not a section"):
        GRPOConfig.from_yaml(
            "recipes/grpo_tiny_cpu.yaml", {"num_train_epochs": 3, "num_train_epochs.x": 1}
        )
    with pytest.raises(ConfigError, match="test must be a mapping"):
        GRPOConfig.from_dict({**BASE, "test": 3})


def test_to_yaml_round_trips(tmp_path):
    """As PacoSFTConfig's: every field and the version, reloaded as the same config."""
    import paco_reward

    cfg = GRPOConfig.from_dict({**BASE, "train": {"resolution": 256}, "bf16": True})
    path = cfg.to_yaml(tmp_path / "training_config.yaml")
    data = yaml.safe_load(path.read_text())
    assert data.pop("paco_rl_version") == paco_reward.__version__
    assert data["train"]["resolution"] == 256 and data["bf16"] is True
    assert GRPOConfig.from_dict(data) == cfg
    # the file as written (version included) reloads like a recipe, overrides too
    assert GRPOConfig.from_yaml(path) == cfg
    assert GRPOConfig.from_yaml(path, {"seed": 7}).seed == 7


def test_the_recipes_commented_cps_setting_loads():
    cfg = GRPOConfig.from_yaml(
        "recipes/grpo_flux_t2is.yaml", {"train.sde_type": "cps", "train.noise_level": 0.8}
    )
    assert (cfg.train.sde_type, cfg.train.cps_log_prob) == ("cps", "gaussian")
    assert (cfg.train.noise_steps, cfg.train.num_steps) == ([1], 10)
    assert GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml").train.sde_type == "sde"


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"rewards": {}}, "rewards must be a non-empty mapping"),
        ({"rewards": {"a": -1.0}}, "rewards weights must be numbers >= 0"),
        ({"prompt_format": "csv"}, "prompt_format must be one of"),
        ({"dtype": "float8"}, "dtype must be one of"),
        ({"bf16": True, "fp16": True}, "bf16 and fp16 are both set"),
        ({"aggregator": "sum"}, "aggregator must be one of"),
        ({"std_scope": "batch"}, "std_scope must be one of"),
        ({"normalization": "none"}, "normalization must be one of"),
        (
            {"log_taming_threshold": "max"},
            "log_taming_threshold must be a number, 'mean' or 'median'",
        ),
        ({"log_taming_threshold": -0.1}, "log_taming_threshold must be >= 0"),
        ({"lora_r": 0}, "lora_r must be a positive integer"),
        (
            {"per_device_train_batch_size": 1.5},
            "per_device_train_batch_size must be a positive integer",
        ),
        ({"num_generations": 1}, "num_generations must be >= 2"),
        ({"epsilon": 0.0}, "epsilon and adv_clip_max must be > 0"),
        ({"beta": -1.0}, "beta must be >= 0"),
        ({"ema_decay": 1.0}, r"ema_decay must be in \[0, 1\)"),
        ({"save_epochs": -1}, "save_epochs, num_sample_images and warmup_steps must be >= 0"),
        ({"lora_target_modules": []}, "lora_target_modules is empty"),
        ({"reward_kwargs": {"consistency": {}}}, r"reward_kwargs names \['consistency'\]"),
        ({"train": {"resolution": 500}}, "train.resolution must be a positive multiple of 16"),
        ({"train": {"num_steps": 0}}, "train.num_steps must be >= 1"),
        ({"train": {"noise_level": 0.0}}, "train.noise_level must be > 0"),
        (
            {"train": {"noise_steps": [10]}},
            r"train.noise_steps must be a non-empty list .* \[0, 9\]",
        ),
        ({"train": {"noise_steps": []}}, "train.noise_steps must be a non-empty list"),
        ({"train": {"sde_type": "ode"}}, r"train.sde_type must be one of \('sde', 'cps'\)"),
        (
            {"train": {"sde_type": "cps", "cps_log_prob": "mse"}},
            r"train.cps_log_prob must be one of \('gaussian', 'released'\); got 'mse'",
        ),
        (
            {"train": {"cps_log_prob": "released"}},
            "train.cps_log_prob='released' applies only to train.sde_type: cps",
        ),
        (
            {"train": {"sde_type": "cps", "noise_level": 1.2}},
            r"train.noise_level must be in \(0, 1\] with train.sde_type: cps.*got 1.2",
        ),
        (
            {"train": {"sde_type": "cps", "num_steps": 4, "noise_steps": [1, 3]}},
            r"train.noise_steps includes the last step \(3\).*got \[1, 3\]",
        ),
        ({"test": {"resolution": 0}}, "test.resolution must be a positive multiple of 16"),
        ({"test": {"num_steps": 0}}, "test.num_steps must be >= 1"),
        ({"per_device_eval_batch_size": 0}, "per_device_eval_batch_size must be a positive"),
        ({"test": {"rewards": {}}}, "test.rewards must be a non-empty mapping"),
    ],
)
def test_validation_errors_name_the_value(overrides, match):
    """Each check fires at load time and names the bad value."""
    with pytest.raises(ConfigError, match=match):
        GRPOConfig.from_dict({**BASE, **overrides})


def test_command_line_flags_are_config_fields():
    from paco_reward.command_line import parse_config

    cfg = parse_config(
        GRPOConfig,
        ["recipes/grpo_tiny_cpu.yaml", "--train.resolution", "256", "--rewards={clip_t: 1.0}",
         "--num-train-epochs", "3", "--train.noise_steps", "0", "1", "--no_use_ema"],
        recipe=True,
    )  # fmt: skip
    assert (cfg.train.resolution, cfg.num_train_epochs, cfg.train.noise_steps) == (256, 3, [0, 1])
    assert cfg.rewards == {"clip_t": 1.0} and cfg.use_ema is False  # a mapping replaces


def test_cli_reports_config_errors(capsys, tmp_path):
    assert main(["train", "recipes/grpo_tiny_cpu.yaml", "--num_generations", "1"]) == 1
    err = capsys.readouterr().err
    assert "num_generations must be >= 2" in err and "Traceback" not in err
    recipe = tmp_path / "r.yaml"
    recipe.write_text(Path("recipes/grpo_tiny_cpu.yaml").read_text() + "max_epochs: 1\n")
    assert main(["train", str(recipe)]) == 1
    err = capsys.readouterr().err
    assert "unknown key(s) ['max_epochs']" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as usage:  # an unknown flag is a usage error
        main(["train", "recipes/grpo_tiny_cpu.yaml", "--lerning_rate", "1"])
    assert usage.value.code == 2
    # the paper recipe's rewards are built at start-up: offline, the evaluator cannot load,
    # and the run stops before any pipeline loads, naming the reward and the fix
    assert main(["train", "recipes/grpo_flux_t2is.yaml"]) == 1
    err = capsys.readouterr().err
    assert "reward 'consistency' could not load its model" in err
    assert "reward_kwargs.consistency.model" in err


@pytest.mark.slow
def test_cli_trains_tiny_recipe(tmp_path, capsys):
    assert main(["tiny-flux", str(tmp_path / "flux")]) == 0
    code = main(
        [
            "train",
            "recipes/grpo_tiny_cpu.yaml",
            "--model_name_or_path",
            str(tmp_path / "flux"),
            "--output_dir",
            str(tmp_path / "out"),
            "--num_train_epochs",
            "2",
            "--test.eval_epochs",
            "0",
            "--report_to",
            "none",
        ]
    )
    assert code == 0
    assert "epoch 2: reward/panel_colour_agreement/mean=" in capsys.readouterr().out
    assert len((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()) == 2


def test_one_tiny_command_per_registered_pipeline(tmp_path, capsys):
    """``paco-grpo tiny-<pipeline>`` comes from the registry and writes what the pipeline's
    diffusers class loads."""
    tiny = [c.name for c in COMMANDS if c.name.startswith("tiny-")]
    pipelines = [tiny_command_name(name) for name in PIPELINE_SPECS]
    assert tiny == [*pipelines, "tiny-ocr"]  # and the OCR reward's reader
    assert main(["tiny-sd3", str(tmp_path / "sd3"), "--seed", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "sd3")
    index = json.loads((tmp_path / "sd3" / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusion3Pipeline"


@pytest.mark.parametrize("pipeline", list(PIPELINE_SPECS))
def test_lora_targets_left_out_are_the_pipelines_own(pipeline, tmp_path):
    """Never FLUX.1's list on another model: left out, ``lora_target_modules`` is the
    pipeline's default, and the saved config names them."""
    spec = PIPELINE_SPECS[pipeline]
    prompts = "p.parquet" if spec.edits else "p.txt"
    cfg = GRPOConfig.from_dict({**BASE, "prompt_file": prompts, "pipeline": pipeline})
    assert cfg.lora_target_modules == list(spec.lora_target_modules)
    assert GRPOConfig.from_yaml(cfg.to_yaml(tmp_path / "training_config.yaml")) == cfg


def test_yaml_exponent_without_a_dot_is_a_number(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_name_or_path: m\nprompt_file: p.txt\nrewards: {clip_t: 1.0}\n"
                      "adam_epsilon: 1e-8\nlearning_rate: 3e-4\n")  # fmt: skip
    cfg = GRPOConfig.from_yaml(recipe)
    assert cfg.adam_epsilon == 1e-8 and cfg.learning_rate == 3e-4
    with pytest.raises(ConfigError, match="learning_rate must be a number; got 'fast'"):
        GRPOConfig.from_yaml(recipe, {"learning_rate": "fast"})


def test_a_missing_tiny_model_names_the_command_that_builds_it(tmp_path, monkeypatch, capsys):
    """``paco-grpo train recipes/grpo_tiny_cpu.yaml`` before ``paco-grpo tiny-flux tiny_flux``
    said "see the stacktrace above" (none was shown); the recipe's first line names the fix."""
    from paco_grpo.cli import main

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)  # no tiny_flux here
    code = main(["train", str(root / "recipes" / "grpo_tiny_cpu.yaml"), "--prompt_file",
                 str(root / "recipes" / "data" / "tiny_prompts.txt")])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "model_name_or_path 'tiny_flux' does not exist" in err
    assert "`paco-grpo tiny-flux tiny_flux`: run that first" in err
    assert not (tmp_path / "grpo_tiny_output").exists()  # refused before anything ran
