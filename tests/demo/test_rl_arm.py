"""``python -m demo.rl_arm`` at tiny scale: one arm's run with the stage's settings and the
overrides on top, its gains the paired ones of its own before and after."""

from __future__ import annotations

import json

import pytest
import yaml

from demo import rl_arm

TINY = "{num_generations: 4, prompts_per_epoch: 2, train.num_steps: 4, test.num_steps: 4, num_train_epochs: 1, learning_rate: 0.004}"  # noqa: E501


@pytest.mark.parametrize("arm", ["paco_half", "gardo"])
def test_one_arm_runs_with_the_overrides_on_top_of_the_stages_settings(
    arm, tmp_path, tiny_world_models, capsys
):
    out = tmp_path / "run"
    argv = [
        "--arm", arm, "--rl_seed", "1", "--overrides", TINY, "--output_dir", str(out),
        "--train_prompts", "2", "--held_out", "3",
        "--evaluator", str(tiny_world_models["world_evaluator"]),
        "--generator", str(tiny_world_models["world_generator"]),
        "--clip", str(tiny_world_models["world_clip"]),
    ]  # fmt: skip
    assert rl_arm.main(argv) == 0
    config = yaml.safe_load((out / "training_config.yaml").read_text())
    assert config["learning_rate"] == 0.004 and config["num_train_epochs"] == 1
    assert config["seed"] == 1 and config["test"]["resolution"] == 64
    if arm == "paco_half":
        assert config["train"]["resolution"] == 32 and config["aggregator"] == "log_tamed"
    else:  # world_hacking's: the proxy alone, GARDO's options, the world CLIP's image tower
        assert config["rewards"] == {"consistency": 1.0, "clip_t": 0.0, "clip_i": 0.0}
        assert config["kl_gate_rewards"] == ["clip_t", "clip_i"] and config["beta"] == 0.04
        assert config["feature_model"] == str(out / "features")
    assert (out / "before_after.png").is_file()
    summary = json.loads((out / "result.json").read_text())
    assert summary["arm"] == arm and summary["overrides"]["learning_rate"] == 0.004
    for key in ("consistency", "alignment", "diversity"):  # a paired gain's mean: after - before
        change = summary[f"{key}_after"] - summary[f"{key}_before"]
        assert summary["gains"][key]["mean"] == pytest.approx(change, abs=1e-9)
    printed = capsys.readouterr().out
    assert "The oracle on 3 held-out prompts" in printed and "consistency" in printed


def test_an_unknown_arm_or_a_missing_evaluator_is_one_line(tmp_path, capsys):
    assert rl_arm.main(["--arm", "clip", "--evaluator", str(tmp_path)]) == 1
    assert "unknown arm 'clip'" in capsys.readouterr().err
    assert rl_arm.main(["--demo_output", str(tmp_path)]) == 1
    assert "run the demo's world_evaluator stage" in capsys.readouterr().err
