"""PaCo-GRPO on the world generator: the run judges the generator it was given before
training (diffusers' own pipeline draws the same grids) and its EMA weights after; the
per-prompt gain's interval is the textbook paired one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from demo.world_generator import (
    GeneratorConfig,
    generator_world,
    held_out_prompts,
    pretrain_world_generator,
    sample_grids,
)
from demo.world_rl import paired_gain, pooled_gain, run_world_grpo
from paco_grpo.rewards import build_reward

TINY = GeneratorConfig(prompts=12, grids_per_prompt=1, vae_steps=4, steps=4, batch_size=4)


def test_a_run_judges_the_given_generator_before_and_its_trained_policy_after(tmp_path):
    from diffusers import FluxPipeline

    generator = pretrain_world_generator(tmp_path / "gen", TINY, progress=False)
    train = generator_world(TINY).make_prompts(2, start=200_000)
    test = held_out_prompts(TINY, 3)
    run = run_world_grpo(
        generator,
        {"panel_colour_agreement": build_reward("panel_colour_agreement", layout="2x2")},
        {"panel_colour_agreement": 1.0},
        train,
        test,
        tmp_path / "run",
        seed=1,
        aggregator="weighted_sum",
        overrides={
            "num_train_epochs": 1,
            "num_generations": 4,
            "prompts_per_epoch": 2,
            "train.num_steps": 4,
            "learning_rate": 0.05,
        },
    )
    base = sample_grids(FluxPipeline.from_pretrained(generator), test, seed=1)
    for ours, theirs in zip(run["before"]["images"], base):
        assert np.abs(np.asarray(ours, dtype=int) - np.asarray(theirs, dtype=int)).max() <= 1
    assert len(run["history"]) == 1 and np.isfinite(
        run["history"][0]["reward/panel_colour_agreement/mean"]
    )
    assert len(run["after"]["per_item"]) == 3
    changed = [
        np.abs(np.asarray(a, dtype=int) - np.asarray(b, dtype=int)).max()
        for a, b in zip(run["after"]["images"], base)
    ]
    assert max(changed) > 1, "the trained policy draws what the base drew"
    prompts = [
        json.loads(line)
        for line in (tmp_path / "run" / "train_prompts.jsonl").read_text().splitlines()
    ]
    assert [p["theme"] for p in prompts] == [r["theme"] for r in train]


def test_the_paired_gain_is_the_mean_difference_with_its_standard_error():
    rng = np.random.default_rng(0)
    before = rng.uniform(0.3, 0.8, 40)
    after = before + rng.normal(0.05, 0.1, 40)
    gain = paired_gain(
        {"per_item": [{"consistency": b} for b in before]},
        {"per_item": [{"consistency": a} for a in after]},
        "consistency",
    )
    assert gain["mean"] == pytest.approx(np.mean(after - before))
    assert gain["se"] == pytest.approx(stats.sem(after - before))
    t = stats.ttest_rel(after, before)
    assert gain["mean"] / gain["se"] == pytest.approx(t.statistic)
    assert gain["low"] == pytest.approx(gain["mean"] - 1.96 * gain["se"])


def _runs(changes_per_run, before):
    return [
        {
            "before": {"per_item": [{"consistency": b} for b in before]},
            "after": {"per_item": [{"consistency": b + c} for b, c in zip(before, changes)]},
        }
        for changes in changes_per_run
    ]


def test_the_gain_over_seeds_is_the_paired_gain_of_the_seed_averaged_change():
    rng = np.random.default_rng(1)
    before = rng.uniform(0.3, 0.8, 30)
    changes = rng.normal(0.05, 0.1, (2, 30))
    runs = _runs(changes, before)
    single = pooled_gain(runs[:1], "consistency")
    assert single == pytest.approx(paired_gain(runs[0]["before"], runs[0]["after"], "consistency"))
    both = pooled_gain(runs, "consistency")
    averaged = changes.mean(axis=0)
    assert both["mean"] == pytest.approx(averaged.mean())
    assert both["se"] == pytest.approx(stats.sem(averaged))


class _SizeRecorder:
    """A reward that remembers the shape of every image it scores (and scores its mean red)."""

    name = "sizes"

    def __init__(self):
        self.sizes = set()

    def __call__(self, images, prompts, metadata):
        arrays = [np.asarray(im) for im in images]  # (3, H, W) tensors in [0, 1]
        self.sizes |= {a.shape for a in arrays}
        return np.array([a[0].mean() for a in arrays])


@pytest.mark.slow
def test_half_resolution_training_is_rewarded_at_half_and_judged_at_full_size(tmp_path):
    """Experiment 3's arm: the policy trains on 32-px grids, the oracle judges 64-px ones."""
    generator = pretrain_world_generator(tmp_path / "gen", TINY, progress=False)
    reward = _SizeRecorder()
    run = run_world_grpo(
        generator,
        {"sizes": reward},
        {"sizes": 1.0},
        generator_world(TINY).make_prompts(2, start=200_000),
        held_out_prompts(TINY, 2),
        tmp_path / "run",
        overrides={
            "num_train_epochs": 1,
            "num_generations": 4,
            "prompts_per_epoch": 2,
            "train.num_steps": 4,
            "train.resolution": 32,
            "test.resolution": 64,
        },
    )
    assert reward.sizes == {(3, 32, 32)}
    assert {im.size for im in run["after"]["images"]} == {(64, 64)}
