"""Quiet on the happy path (issue 51): a command run without ``-v`` shows no library progress
bars (weights loaded, model shards written, pipeline components) and no expected warnings
(prompts truncated to a text encoder's length, "No memory plan" for a tiny recipe's model);
``-v`` shows the bars again. The commands run as a user runs them, in child processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What the happy path printed before (each a line of stderr).
NOISE = ("Loading weights", "Writing model shards", "Loading pipeline components", "it/s]",
         "was truncated because", "Token indices sequence length", "No memory plan")  # fmt: skip


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        env.pop(name, None)  # as on a user's machine
    done = subprocess.run([sys.executable, "-m", *command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def noise(stderr: str) -> list[str]:
    return [line for line in stderr.replace("\r", "\n").splitlines() if any(n in line for n in NOISE)]


def test_building_a_tiny_judge_shows_no_progress_bars_unless_verbose(tmp_path):
    quiet = run(["paco_reward.cli", "tiny", "judge"], tmp_path)
    assert noise(quiet.stderr) == [], quiet.stderr
    verbose = run(["paco_reward.cli", "tiny", "judge_v", "-v"], tmp_path)
    assert "Writing model shards" in verbose.stderr  # -v: the library's bars are back


@pytest.mark.slow
def test_the_tiny_recipes_are_quiet(tmp_path):
    """The README's tiny GRPO run (its truncated prompts, its pipeline's bars) and the tiny SFT
    recipe (its from-scratch model was planned before it existed: "No memory plan")."""
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    outputs = [
        run(["paco_grpo.cli", "tiny-flux", "tiny_flux"], tmp_path),
        run(["paco_grpo.cli", "train", "recipes/grpo_tiny_cpu.yaml", "--num_train_epochs", "1"],
            tmp_path),  # fmt: skip
        run(["paco_reward.cli", "train", "recipes/tiny_cpu.yaml", "--max_steps", "1",
             "--dataset_path", "toy-colour-pairs", "--toy_train_size", "16", "--toy_test_size",
             "4", "--output_dir", "sft", "--model_name_or_path", "sft/base", "--report_to",
             "none", "--eval_steps", "1000", "--save_steps", "1000"], tmp_path),  # fmt: skip
    ]
    for done in outputs:
        # The trainers' own progress (GRPO epochs, the SFT steps) stays: it is not noise.
        lines = [line for line in noise(done.stderr) if "GRPO epochs" not in line
                 and not line.lstrip().startswith(("0%", "100%"))]  # fmt: skip
        assert lines == [], done.stderr[-3000:]
    assert "SFT on 1 process(es)" in outputs[2].stdout  # the plan was made, for the tiny model
