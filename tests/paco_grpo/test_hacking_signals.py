"""The hacking signals: each function against a hand computation, and a tiny run that
logs them to metrics.jsonl and TensorBoard (with a tiny DINOv3 feature model and a
held-out judge of the training criterion)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.hacking_signals import (
    advantage_signals,
    group_std_signals,
    held_out_gaps,
    in_group_diversity,
)
from paco_grpo.testing.features import build_tiny_dinov3
from paco_grpo.testing.flux import build_tiny_flux

RECIPE = "recipes/grpo_tiny_cpu.yaml"


def test_group_std_and_zero_std_share_by_hand():
    r = {"a": np.array([1.0, 1.0, 0.0, 2.0, 5.0, np.nan]), "b": np.arange(6.0)}
    rows = group_std_signals(r, ["x", "x", "y", "y", "z", "z"])
    # a: x std 0, y std 1, z has one finite score (left out)
    assert rows["hacking/a/group_std_min"] == 0.0 and rows["hacking/a/group_std_max"] == 1.0
    assert rows["hacking/a/group_std_mean"] == 0.5 and rows["hacking/a/zero_std_fraction"] == 0.5
    assert rows["hacking/b/group_std_mean"] == pytest.approx(0.5)
    assert rows["hacking/b/zero_std_fraction"] == 0.0


def test_advantage_and_diversity_and_gap_by_hand():
    rows = advantage_signals(np.array([-2.0, 1.0, 0.5]))
    assert rows == {"hacking/advantage_min": -2.0, "hacking/advantage_max": 1.0,
                    "hacking/advantage_abs_mean": pytest.approx(3.5 / 3)}  # fmt: skip
    # group 0: two orthogonal images (distance 1); group 1: one picture twice (distance 0)
    f = np.array([[1.0, 0.0], [0.0, 3.0], [0.5, 0.5], [2.0, 2.0]])
    rows = in_group_diversity(f, [0, 0, 1, 1])
    assert rows["hacking/diversity/mean"] == pytest.approx(0.5)
    assert rows["hacking/diversity/min"] == pytest.approx(0.0, abs=1e-12)
    # three images at 0, 90, 180 degrees: pairwise distances 1, 2, 1
    f3 = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert in_group_diversity(f3, [0, 0, 0])["hacking/diversity/mean"] == pytest.approx(4 / 3)
    assert held_out_gaps({"c": 0.8, "d": 0.1}, {"c": 0.5}) == {
        "hacking/held_out_gap/c": pytest.approx(0.3)
    }


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)


def test_a_tiny_run_logs_the_signals_to_metrics_and_tensorboard(flux_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    dino = build_tiny_dinov3(tmp_path / "dino")
    cfg = GRPOConfig.from_yaml(RECIPE, {
        "model_name_or_path": str(flux_dir), "output_dir": str(tmp_path / "run"),
        "report_to": ["tensorboard"], "num_train_epochs": 2, "num_iterations": 1,
        "prompts_per_epoch": 2, "num_generations": 4, "sample_batch_size": 8,
        "per_device_train_batch_size": 8, "num_sample_images": 0, "save_epochs": 0,
        "feature_model": str(dino),
        # the held-out judge: the same criterion built apart (other constructor arguments)
        "test.eval_epochs": 1, "test.num_prompts": 2, "per_device_eval_batch_size": 2,
        "test.reward_kwargs": {"panel_colour_agreement": {"layout": "2x2"}},
    })  # fmt: skip
    trainer = GRPOTrainer(cfg)
    assert list(trainer.evaluator.train_judges) == ["panel_colour_agreement"]
    trainer.train()
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    keys = [
        "hacking/panel_colour_agreement/group_std_min",
        "hacking/panel_colour_agreement/group_std_mean",
        "hacking/panel_colour_agreement/group_std_max",
        "hacking/panel_colour_agreement/zero_std_fraction",
        "hacking/advantage_min",
        "hacking/advantage_max",
        "hacking/advantage_abs_mean",
        "hacking/diversity/mean",
        "hacking/diversity/min",
        "hacking/held_out_gap/panel_colour_agreement",
    ]
    for row in rows:
        for key in keys:
            assert np.isfinite(row[key]), key
        assert 0 < row["hacking/diversity/mean"] <= 2
        lo, mean, hi = (
            row[f"hacking/panel_colour_agreement/group_std_{s}"] for s in ("min", "mean", "max")
        )
        assert 0 <= lo <= mean <= hi
    # the gap is training judge minus held-out judge on the same evaluation images
    row = rows[-1]
    gap = (
        row["eval/reward/train_judge:panel_colour_agreement/mean"]
        - row["eval/reward/panel_colour_agreement/mean"]
    )
    assert row["hacking/held_out_gap/panel_colour_agreement"] == pytest.approx(gap)
    events = EventAccumulator(str(tmp_path / "run" / "paco-grpo"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert set(keys) <= tags, sorted(set(keys) - tags)
