"""The reward-hacking stage at tiny scale: every arm trains the proxy with its defence (the
recipe fields each arm sets reach the trainer), every run logs the hacking signals, and the
table's gains are the oracle's per-prompt changes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml
from scipy import stats

import demo.stage_world_grpo as grpo
import demo.stage_world_hacking as stage
from demo import stage_report
from demo.world_generator import generator_world, held_out_prompts


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

    # Stage world_grpo's arm 1 is this stage's log-tamed arm: run there, it is the same run
    # (the same judgements and rewards), and this stage takes it instead of training again.
    for name in ("SEEDS", "EPOCHS", "TRAIN_PROMPTS", "HELD_OUT", "RECIPE_OVERRIDES"):
        monkeypatch.setattr(grpo, name, getattr(stage, name))
    config, generator, evaluator, clip = grpo.world_models(world_ctx)
    inputs = grpo.RunInputs(
        generator=generator,
        evaluator=evaluator,
        clip=clip,
        features=grpo.feature_model(world_ctx, clip),
        train_records=generator_world(config).make_prompts(2, start=grpo.TRAIN_START),
        test_records=held_out_prompts(config, 3),
    )
    monkeypatch.setattr(grpo, "ARMS", (grpo.PACO,))
    world_ctx.artifacts["world_grpo"] = grpo._train_all(world_ctx, inputs)
    earlier = world_ctx.artifacts["world_grpo"][grpo.PACO][0]
    fresh = results[stage.LOG_TAMED][0]
    for when in ("before", "after"):
        assert earlier[when]["per_item"] == fresh[when]["per_item"]
    assert [r["reward/consistency/mean"] for r in earlier["history"]] == [
        r["reward/consistency/mean"] for r in fresh["history"]
    ]
    task = stage.run_task(stage.LOG_TAMED, 0, inputs, tmp_path / "anywhere")
    assert stage.earlier_run(world_ctx, task) is earlier
    assert stage.earlier_run(world_ctx, stage.run_task(stage.KL_ALL, 0, inputs, tmp_path)) is None
