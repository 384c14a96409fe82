"""The reward-hacking stage at tiny scale: every arm trains the proxy with its defence (the
recipe fields each arm sets reach the trainer), every run logs the hacking signals, and the
table's gains are the oracle's per-prompt changes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml
from scipy import stats

import demo.stage_world_hacking as stage
from demo import stage_report


@pytest.mark.slow
def test_each_defence_trains_the_proxy_and_the_table_holds_the_oracles_changes(
    tmp_path, monkeypatch, world_ctx
):
    monkeypatch.setattr(stage, "SEEDS", (0,))
    monkeypatch.setattr(stage, "EPOCHS", 2)
    monkeypatch.setattr(stage, "TRAIN_PROMPTS", 2)
    monkeypatch.setattr(stage, "HELD_OUT", 3)
    monkeypatch.setattr(
        stage,
        "RECIPE_OVERRIDES",
        {"num_generations": 4, "prompts_per_epoch": 2, "train.num_steps": 4, "test.num_steps": 4},
    )
    stage.run(world_ctx)

    (section,) = world_ctx.report
    results = world_ctx.artifacts["world_hacking"]
    assert [row[:2] for row in section.rows] == [
        [arm.name, seed] for arm in stage.ARMS for seed in (0, "all")
    ]
    for arm in stage.ARMS:
        folder = tmp_path / "out" / "world_hacking" / f"{arm.slug}_seed0"
        config = yaml.safe_load((folder / "training_config.yaml").read_text())
        assert config["rewards"] == arm.rewards and config["aggregator"] == arm.aggregator
        assert config["beta"] == (0.0 if arm in (stage.ALONE, stage.LOG_TAMED) else stage.BETA)
        run = results[arm][0]
        history = run["history"]
        assert len(history) == 2 and all(np.isfinite(r["hacking/diversity/mean"]) for r in history)
        (row,) = [r for r in section.rows if r[:2] == [arm.name, 0]]
        for cell, key in zip(row[2:5], ("consistency", "alignment", "diversity")):
            change = [
                a[key] - b[key] for a, b in zip(run["after"]["per_item"], run["before"]["per_item"])
            ]
            mean, low, _ = (float(x) for x in re.findall(r"[+-]\d\.\d+", cell))
            assert mean == pytest.approx(np.mean(change), abs=5e-4), (arm.slug, key)
            assert mean - low == pytest.approx(1.96 * stats.sem(change), abs=1e-3)
    gardo = yaml.safe_load(
        (tmp_path / "out" / "world_hacking" / "gardo_seed0" / "training_config.yaml").read_text()
    )
    assert gardo["kl_reference"] == "adapter" and gardo["diversity_advantage"] is True
    assert gardo["kl_gate_rewards"] == ["clip_t", "clip_i"]
    assert "train/kl_gated" in results[stage.GARDO_ARM][0]["history"][0]

    stage_report.run(world_ctx)
    report = (tmp_path / "out" / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert "world_hacking/proxy.png" in links
    assert all((tmp_path / "out" / link).is_file() for link in links)
