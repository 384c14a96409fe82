"""The one command-line dialect (:mod:`paco_reward.command_line`): what a flag reads as and
which mistakes are usage errors (exit 2) rather than failures inside the command (exit 1)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from paco_reward.command_line import (
    Command,
    config_field,
    mapping_fields,
    parse_config,
    run_cli,
)


@dataclass(kw_only=True)
class Args:
    """Test arguments."""

    files: list[str] = config_field(list, help="files", positional=True, nargs="*")
    scorer: list[str] = config_field(help="repeatable, required")
    limit: int | None = config_field(None, help="an optional int")
    rate: float = config_field(0.5, help="a float")
    progress: bool = config_field(True, help="a flag on by default")
    name: str | None = config_field(None, help="an optional string")

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ValueError(f"rate must be >= 0; got {self.rate}.")


def test_flags_read_as_their_fields():
    args = parse_config(
        Args,
        ["1", "true", "--scorer", "a", "b", "--scorer", "c", "--limit", "3", "--rate", "1e-4",
         "--no-progress", "--name", "007"],
    )  # fmt: skip
    assert args.files == ["1", "true"]  # file names stay text
    assert args.scorer == ["a", "b", "c"]  # a repeated list flag adds to the list
    assert (args.limit, args.rate, args.progress, args.name) == (3, 1e-4, False, "007")
    args = parse_config(Args, ["--scorer=x", "--limit", "null", "--rate", "2", "--no_progress"])
    assert (args.files, args.limit, args.rate, args.progress) == ([], None, 2.0, False)
    assert isinstance(args.rate, float)
    assert parse_config(Args, ["--scorer", "x", "--progress", "false"]).progress is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--limit", "3"], "the following arguments are required: --scorer"),
        (["--scorer", "x", "--limit", "two"], "argument --limit: expected int; got 'two'"),
        (["--scorer", "x", "--rate", "fast"], "argument --rate: expected float; got 'fast'"),
        (["--scorer", "x", "--progress", "maybe"], "expected true or false; got 'maybe'"),
        (["--scorer", "x", "--limt", "3"], "unrecognized arguments: --limt"),
    ],
)
def test_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as usage:
        run_cli("prog", "test", [Command("run", Args, lambda args: 0, "run")], argv)
    assert usage.value.code == 2
    assert message in capsys.readouterr().err


def test_errors_in_the_command_exit_1_with_one_line(capsys, tmp_path):
    def run(args) -> int:
        (tmp_path / "missing" / "x").read_text()
        return 0

    commands = [Command("run", Args, run, "run")]
    assert run_cli("prog", "test", commands, ["--scorer", "x", "--rate", "-1"]) == 1
    assert capsys.readouterr().err == "prog: error: rate must be >= 0; got -1.0.\n"
    assert run_cli("prog", "test", commands, ["--scorer", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("prog: error: [Errno 2] No such file") and "missing" in err
    assert len(err.splitlines()) == 1
    assert (
        run_cli("prog", "test", [Command("run", Args, lambda a: None, "run")], ["--scorer", "x"])
        == 0
    )


def test_yaml_words_stay_words_where_transformers_expects_a_string(tmp_path):
    """``no`` is YAML 1.1's False; transformers' strategies spell "no" as a string. On the
    command line and in a recipe it reaches TrainingArguments as the word, which converts it."""
    from transformers.trainer_utils import IntervalStrategy, SaveStrategy

    from paco_reward.training import PacoSFTConfig

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"output_dir: {tmp_path / 'out'}\nsave_strategy: no\nuse_cpu: true\n")
    config = parse_config(
        PacoSFTConfig, [str(recipe), "--eval_strategy", "no", "--report_to", "none"], recipe=True
    )
    assert config.eval_strategy == IntervalStrategy.NO
    assert config.save_strategy == SaveStrategy.NO
    assert config.report_to == []  # transformers' reading of "none"
    # A number where the union takes none stays text, and transformers names the bad value.
    with pytest.raises(ValueError, match="7 is not a valid IntervalStrategy"):
        parse_config(PacoSFTConfig, [str(recipe), "--eval_strategy", "7"], recipe=True)


@dataclass(kw_only=True)
class Recipe:
    """A recipe whose mappings take one entry at a time."""

    seed: int = config_field(0, help="an int")
    reward_kwargs: dict[str, dict] = config_field(dict, help="a mapping of mappings")
    rewards: dict[str, float] | None = config_field(None, help="an optional mapping")


def test_a_dotted_flag_sets_one_entry_of_a_mapping(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "reward_kwargs:\n  consistency: {model: X, template: consistency}\n  clip_t: {model: C}\n"
    )
    config = parse_config(
        Recipe,
        [str(recipe), "--reward_kwargs.consistency.server_url", "http://127.0.0.1:8001/v1",
         "--reward-kwargs.consistency.model=PaCo", "--seed", "2", "--rewards.clip_t", "0.5"],
        recipe=True,
    )  # fmt: skip
    assert config.reward_kwargs == {
        "consistency": {"model": "PaCo", "template": "consistency",
                        "server_url": "http://127.0.0.1:8001/v1"},
        "clip_t": {"model": "C"},
    }  # fmt: skip
    assert config.seed == 2 and config.rewards == {"clip_t": 0.5}  # read as YAML
    # an entry wins over its whole mapping given on the same line, wherever it stands
    argv = [str(recipe), "--reward_kwargs.clip_t.model", "D", "--reward_kwargs", "{clip_t: {}}"]
    assert parse_config(Recipe, argv, recipe=True).reward_kwargs == {"clip_t": {"model": "D"}}


def test_the_mappings_of_a_grpo_recipe_take_entry_flags_in_their_sections_too():
    from paco_grpo.grpo_config import GRPOConfig

    assert mapping_fields(GRPOConfig) == [
        "rewards", "model_init_kwargs", "reward_kwargs", "test.rewards", "test.reward_kwargs"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reward_kwargs.clip_t.model"], "--reward_kwargs.clip_t.model sets one entry of "
                                           "reward_kwargs: it needs a value"),
        (["--reward_kwargs.clip_t.model", "--seed", "1"], "it needs a value"),
        (["--seed.x", "1"], "unrecognized arguments: --seed.x 1"),
    ],
)  # fmt: skip
def test_entry_flags_without_a_value_or_a_mapping_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as usage:
        run_cli("prog", "test", [Command("run", Recipe, lambda args: 0, "run")], argv)
    assert usage.value.code == 2
    assert message in capsys.readouterr().err
