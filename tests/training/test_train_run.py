"""One SFT run (``run_training``): its output folder is its own (another run's checkpoints are
refused unless resumed or overwritten), it evaluates once per evaluated step, its loss curve
fits the data, and a warm-up longer than the run is warned about."""

from __future__ import annotations

import json
import logging

import pytest

from paco_reward.errors import OutputDirInUseError
from paco_reward.training import PacoSFTConfig, run_training
from paco_reward.training.callbacks import metrics_figure, read_metrics


def _config(out, model_dir, **overrides) -> PacoSFTConfig:
    values = dict(
        output_dir=str(out),
        model_name_or_path=str(model_dir),
        dataset_path="toy-colour-pairs",
        toy_train_size=8,
        toy_test_size=4,
        tiny_vision="base",
        image_min_pixels=784,
        image_max_pixels=784,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=2,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    values.update(overrides)
    return PacoSFTConfig(**values)


def _checkpoints(out) -> list[str]:
    return sorted(p.name for p in out.glob("checkpoint-*"))


def test_one_evaluation_per_step_and_the_final_metrics_are_the_last_steps(
    tmp_path, tiny_model_dir
):
    out = tmp_path / "run"
    metrics = run_training(_config(out, tiny_model_dir, save_strategy="no"))
    evaluated = [r["step"] for r in read_metrics(out) if "eval_loss" in r]
    assert evaluated == [1, 2]  # transformers evaluates at the last step: not a second time
    last = next(r for r in reversed(read_metrics(out)) if "eval_loss" in r)
    assert metrics["eval_decision_accuracy"] == last["eval_decision_accuracy"]
    assert json.loads((out / "final_metrics.json").read_text()) == metrics


def test_a_reused_output_dir_is_refused_unless_resumed_overwritten_or_the_same_run(
    tmp_path, tiny_model_dir
):
    out = tmp_path / "run"
    run_training(_config(out, tiny_model_dir))
    assert _checkpoints(out) == ["checkpoint-1", "checkpoint-2"]

    def steps() -> list[int]:
        return [r["step"] for r in read_metrics(out) if "loss" in r]

    # another run (other max_steps) into the folder: refused, nothing of the first run lost
    with pytest.raises(OutputDirInUseError, match=rf"{out}.*--overwrite_output_dir true"):
        run_training(_config(out, tiny_model_dir, max_steps=3))
    assert _checkpoints(out) == ["checkpoint-1", "checkpoint-2"] and steps() == [1, 2]

    # the same config started again: allowed, and the metrics are its own (not appended)
    run_training(_config(out, tiny_model_dir))
    assert _checkpoints(out) == ["checkpoint-1", "checkpoint-2"] and steps() == [1, 2]

    # resuming the first run's last checkpoint with more steps continues its curve
    resume = str(out / "checkpoint-2")
    run_training(_config(out, tiny_model_dir, max_steps=3, resume_from_checkpoint=resume))
    assert _checkpoints(out) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert steps() == [1, 2, 3]

    # overwrite_output_dir: the earlier outputs go, the new run's alone remain
    run_training(_config(out, tiny_model_dir, max_steps=1, overwrite_output_dir=True))
    assert _checkpoints(out) == ["checkpoint-1"] and steps() == [1]


def test_a_warm_up_longer_than_the_run_is_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="paco_reward.training.sft_config"):
        PacoSFTConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=2,
                      reasoning_warmup_steps=2500)  # fmt: skip
    assert "reasoning_warmup_steps=2500 is not below max_steps=2" in caplog.text
    assert "Lower --reasoning_warmup_steps" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="paco_reward.training.sft_config"):
        PacoSFTConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=3500,
                      reasoning_warmup_steps=2500)  # fmt: skip
    assert "reasoning_warmup_steps" not in caplog.text


def test_the_loss_curve_axes_fit_the_data():
    # the smoke run: two steps, a loss near 7, a warm-up of 2,500 steps it never reaches
    rows = [
        {"step": 1, "loss": 6.86},
        {"step": 2, "loss": 6.5},
        {"step": 2, "eval_loss": 6.9, "eval_decision_accuracy": 0.5},
    ]
    fig = metrics_figure(rows, warmup_steps=2500)
    ax, acc = fig.axes
    low, high = ax.get_xlim()
    assert low < 1 and 2 < high < 3  # not stretched to the warm-up's end
    bottom, top = ax.get_ylim()
    assert bottom < 6.5 and 6.9 < top
    assert all(line.get_marker() not in (None, "None", "") for line in ax.get_lines())
    assert "beyond this run" in ax.get_title()
    # a single logged step is still a visible point
    (line,) = metrics_figure([{"step": 2, "loss": 6.86}]).axes[0].get_lines()
    assert line.get_marker() not in (None, "None", "")


def test_a_missing_input_of_the_tiny_recipe_names_the_command_that_builds_it(
    tmp_path, monkeypatch, capsys
):
    from pathlib import Path

    from paco_reward.cli import main

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny_cpu.yaml"
    monkeypatch.chdir(tmp_path)  # no runs/synthetic here
    assert main(["train", str(recipe), "--max_steps", "2"]) == 1
    err = capsys.readouterr().err
    assert "dataset_path 'runs/synthetic/export' does not exist" in err
    assert "`paco-data demo runs/synthetic --n_prompts 144`: run that first" in err
    assert not (tmp_path / "runs").exists()  # nothing built or written before the refusal
