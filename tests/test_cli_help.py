"""What a newcomer meets first on every ``paco-*`` command line: help with defaults and
choices, "did you mean" for a typo, the subcommand's usage on a flag error, no abbreviations,
plain text, and ``--help`` / usage errors before torch is imported (issue 51, item 6)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from paco_reward.command_line import Command, config_field, run_cli

ROOT = Path(__file__).resolve().parents[1]


@dataclass(kw_only=True)
class Args:
    """Arguments of a toy command."""

    limit: int = config_field(3, help="How many.")
    mode: str = config_field("fast", help="fast or slow.")


def _run(argv, capsys):
    commands = [Command("run", Args, lambda a: 0, "run"), Command("other", Args, lambda a: 0, "o")]
    with pytest.raises(SystemExit) as usage:
        run_cli("prog", "test", commands, argv)
    return usage.value.code, capsys.readouterr()


def test_no_abbreviations_and_did_you_mean_with_the_subcommands_usage(capsys):
    code, out = _run(["run", "--limi", "4"], capsys)  # argparse took this for --limit
    assert code == 2
    assert "unrecognized arguments: --limi 4 (did you mean '--limit'?)" in out.err
    assert out.err.startswith("usage: prog run ")  # the subcommand's usage, not the program's
    code, out = _run(["rnu"], capsys)
    assert code == 2 and "invalid choice: 'rnu'" in out.err and "did you mean 'run'?" in out.err


def test_help_shows_defaults_and_no_markup(capsys):
    code, out = _run(["run", "--help"], capsys)
    assert code == 0
    assert "How many. (default: 3)" in " ".join(out.out.split())
    from paco_reward.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert "paco-reward: score" in top and "``" not in top and ":class:" not in top
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    serve = " ".join(capsys.readouterr().out.split())
    assert "TCP port. (default: 8000)" in serve and "(default: 32)" in serve  # max_batch_size


def _fresh_python(code: str, cache: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PACO_CLI_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    return done, time.perf_counter() - start


PROBE = """
import sys
from {module} import main
try:
    code = main({argv!r})
except SystemExit as exit:
    code = exit.code
heavy = sorted(m for m in ("torch", "transformers", "trl", "diffusers") if m in sys.modules)
print("EXIT", code, "HEAVY", heavy)
"""


@pytest.mark.parametrize(
    ("module", "argv", "exit_code", "says"),
    [
        ("paco_reward.cli", ["train", "--help"], 0, "(choices: linear, cosine"),
        ("paco_reward.cli", ["train", "no-such-recipe.yaml"], 1, "No recipe file at"),
        ("paco_reward.cli", ["train", "recipes/tiny_cpu.yaml", "--max_step", "2"], 2,
         "did you mean '--max_steps'"),  # fmt: skip
        ("paco_grpo.cli", ["--help"], 0, "tiny-flux"),
        ("paco_grpo.cli", ["train", "--help"], 0, "--train.resolution"),
        ("paco_grpo.cli", ["train", "{recipe}"], 1, "did you mean 'num_train_epochs'"),
        ("data_pipeline.cli", ["demo", "--help"], 0, "--n_prompts"),
        ("paco_eval.cli", ["gedit", "--help"], 0, "generate Generate the benchmark's images"),
        ("paco_eval.cli", ["vcreward", "judge", "--data", "d", "--tsks", "x"], 2,
         "did you mean '--tasks'"),  # fmt: skip
    ],
)
def test_help_and_usage_errors_come_before_heavy_imports(
    module, argv, exit_code, says, tmp_path_factory
):
    """The first run of a command builds its options from its config (importing it); from
    then on ``--help`` and usage errors need neither torch nor transformers."""
    cache = tmp_path_factory.getbasetemp() / "cli-cache"  # shared: one warm-up per command
    recipe = tmp_path_factory.mktemp("recipe") / "typo.yaml"
    recipe.write_text("model_name_or_path: tiny_flux\nnum_train_epoch: 2\n")
    argv = [a.replace("{recipe}", str(recipe)) for a in argv]
    probe = PROBE.format(module=module, argv=argv)
    _fresh_python(probe, cache)  # warms the cache
    done, seconds = _fresh_python(probe, cache)
    out = done.stdout + done.stderr
    assert f"EXIT {exit_code} HEAVY []" in out, out
    assert says in " ".join(out.split()), out
    assert seconds < 20, seconds  # ~0.3-1 s idle; generous for a loaded machine


def test_a_mistyped_recipe_key_gets_its_closest_key_not_every_key(tmp_path):
    from paco_grpo.grpo_config import GRPOConfig
    from paco_reward.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        GRPOConfig.from_dict({"model_name_or_path": "x", "num_train_epoch": 2})
    message = str(info.value)
    assert "did you mean 'num_train_epochs'" in message
    assert "learning_rate" not in message  # not the ~60 valid keys
    assert "--help" in message


def test_the_readme_links_resolve_in_a_checkout():
    """Every relative link of the README names a file of the checkout (docs/cli.md was only
    in the built site)."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert "docs/cli.md" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def test_the_checked_in_cli_reference_is_current():
    """docs/cli.md is what docs/hooks.py generates (rewrite it: ``python docs/hooks.py``)."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    expected = hooks.cli_reference() + "\n"
    assert (ROOT / "docs" / "cli.md").read_text() == expected, (
        "docs/cli.md is stale: run `python docs/hooks.py`"
    )
