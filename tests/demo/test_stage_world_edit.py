"""The editing stage at tiny scale: both arms run on each seed in worker processes with the
Kontext policy, the PaCo arm is rewarded by the evaluator's edit templates and CLIP-T, the
table's gains are the paired per-edit gains (checked with scipy), and the report gets the
table with images that exist."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml
from scipy import stats

import demo.stage_world_edit as stage
from demo import pretrained, stage_report


@pytest.mark.slow
def test_the_editing_experiment_gets_its_table_from_real_runs(tmp_path, monkeypatch, world_ctx):
    monkeypatch.setattr(stage, "EPOCHS", 2)
    monkeypatch.setattr(stage, "TRAIN_EDITS", 4)
    monkeypatch.setattr(stage, "HELD_OUT", 6)
    monkeypatch.setattr(pretrained, "EDITOR_CONFIG", {"edits": 8, "steps": 2, "batch_size": 4})
    monkeypatch.setattr(
        stage,
        "RECIPE_OVERRIDES",
        {"num_generations": 4, "prompts_per_epoch": 2, "train.num_steps": 4, "test.num_steps": 4},
    )
    ctx = world_ctx
    stage.run(ctx)

    section, rewards = ctx.report
    assert section.heading == "Experiment 5: editing"
    names = [row[0] for row in section.rows]
    assert names[:2] == ["ground truth (the world's renders)", "the source, unchanged"]
    # ground truth: every asked value shows; the unchanged source: none does.
    assert section.rows[0][3] == 1.0 and section.rows[1][3] == 0.0
    results = ctx.artifacts["world_edit"]
    assert [row[:2] for row in section.rows[2:]] == [
        [arm.name, seed] for arm in stage.ARMS for seed in (0, 1, "both")
    ]
    for arm, runs in results.items():
        (both,) = [r for r in section.rows if r[:2] == [arm.name, "both"]]
        for column, key in zip((4, 7, 10), stage.EDIT_SCORES):
            change = np.mean(
                [
                    [
                        a[key] - b[key]
                        for a, b in zip(r["after"]["per_item"], r["before"]["per_item"])
                    ]
                    for r in runs.values()
                ],
                axis=0,
            )
            mean, low, _ = (float(x) for x in re.findall(r"[+-]\d\.\d+", both[column]))
            assert mean == pytest.approx(change.mean(), abs=5e-4)
            if change.std() > 0:
                assert mean - low == pytest.approx(1.96 * stats.sem(change), abs=1e-3)
        for seed, run in runs.items():
            folder = tmp_path / "out" / "world_edit" / f"{arm.slug}_seed{seed}"
            config = yaml.safe_load((folder / "training_config.yaml").read_text())
            assert config["pipeline"] == "flux_kontext"
            assert set(config["rewards"]) == (
                {"edit_consistency", "clip_t"} if arm.paco else {"clip_t"}
            )
            assert len(run["history"]) == 2
            for row in run["history"]:
                assert all(np.isfinite(row[f"reward/{name}/mean"]) for name in config["rewards"])
            assert {im.size for im in run["after"]["images"]} == {(32, 32)}

    # The reward table scores the PaCo arm's first "before" edits: its PaCo row is the mean
    # the editing reward itself gives them.
    from paco_grpo.rewards import EditConsistencyReward

    before = results[stage.PACO_EDIT][0]["before"]
    world = stage.editor_world(ctx.artifacts["world_generator"])
    records = stage.make_edits(world, 6, start=stage.HELD_OUT_START)
    sources = [stage.render_edit(world, r)[0] for r in records]
    expected = EditConsistencyReward(ctx.artifacts["world_evaluator"])(
        before["images"], [r["prompt"] for r in records], [{"source_image": s} for s in sources]
    )
    (paco_row,) = [row for row in rewards.rows if row[0].startswith("PaCo edit reward")]
    assert paco_row[1] == pytest.approx(expected.mean(), abs=1e-6)
    assert [len(row) for row in rewards.rows] == [5] * 4

    stage_report.run(ctx)
    report = (tmp_path / "out" / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert "world_edit/rewards.png" in links and len(links) == 1 + 2 * len(stage.ARMS)
    assert all((tmp_path / "out" / link).is_file() for link in links)
