"""The RL-in-miniature stage at tiny scale: every arm runs on each seed in its own worker
process, each experiment's table compares its arm with arm 1 (a row per seed and one over
the seeds), the half-resolution arm trains at half the judged size, and the report gets
every table with images that exist."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import yaml
from scipy import stats

import demo.stage_world_grpo as stage
from demo import stage_report


@pytest.mark.slow
def test_every_experiment_gets_its_table_from_real_runs(tmp_path, monkeypatch, world_ctx):
    monkeypatch.setattr(stage, "SEEDS", (0, 1))
    monkeypatch.setattr(stage, "EPOCHS", 2)
    monkeypatch.setattr(stage, "TRAIN_PROMPTS", 2)
    monkeypatch.setattr(stage, "HELD_OUT", 3)
    monkeypatch.setattr(
        stage,
        "RECIPE_OVERRIDES",
        {"num_generations": 4, "prompts_per_epoch": 2, "train.num_steps": 4, "test.num_steps": 4},
    )
    ctx = world_ctx
    stage.run(ctx)

    headings = [section.heading for section in ctx.report]
    assert headings == [heading for heading, _ in stage.EXPERIMENTS]
    results = ctx.artifacts["world_grpo"]
    for section, (_, arms) in zip(ctx.report, stage.EXPERIMENTS):
        assert [row[:2] for row in section.rows] == [
            [arm.name, seed] for arm in arms for seed in (0, 1, "both")
        ]
        for arm in arms:
            (both,) = [r for r in section.rows if r[:2] == [arm.name, "both"]]
            runs = results[arm].values()
            change = np.mean(
                [
                    [
                        a["consistency"] - b["consistency"]
                        for a, b in zip(r["after"]["per_item"], r["before"]["per_item"])
                    ]
                    for r in runs
                ],
                axis=0,
            )
            mean, low, _ = (float(x) for x in re.findall(r"[+-]\d\.\d+", both[4]))
            assert mean == pytest.approx(change.mean(), abs=5e-4)
            assert mean - low == pytest.approx(1.96 * stats.sem(change), abs=1e-3)
        assert all(math.isfinite(r[8]) for r in section.rows if r[1] != "both")
        # Tiny runs take about a second: the cells are whole seconds, so check the raw times.
        for r in section.rows:
            if r[1] != "both":
                run = results[next(a for a in arms if a.name == r[0])][r[1]]
                own = stage.generator_seconds(run["history"])
                assert 0 < own <= run["seconds"]
                assert r[9:] == [f"{run['seconds']:.0f}", f"{own:.0f}"]

    for arm, runs in results.items():
        for seed, run in runs.items():
            folder = tmp_path / "out" / "world_grpo" / f"{arm.slug}_seed{seed}"
            config = yaml.safe_load((folder / "training_config.yaml").read_text())
            assert config["train"]["resolution"] == 64 * arm.resolution_fraction
            assert config["aggregator"] == arm.aggregator
            assert len(run["history"]) == 2
            assert {im.size for im in run["after"]["images"]} == {(64, 64)}
    assert results[stage.CLIP_I][0]["history"][0].keys() >= {"reward/clip_i/mean"}

    stage_report.run(ctx)
    report = (tmp_path / "out" / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert "world_grpo/reward_ratio.png" in links
    assert all((tmp_path / "out" / link).is_file() for link in links)
