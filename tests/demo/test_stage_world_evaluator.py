"""The world evaluator fine-tunes the train stage's evaluator of the world's renders: it finds
that one (not the toy evaluator, which has no recipe beside it) and, without it, says so."""

from __future__ import annotations

import shutil

from demo import stage_world_evaluator
from demo.context import DemoContext
from demo.stage_train import trained_evaluator


def test_the_evaluator_to_fine_tune_is_the_one_trained_on_pairs(tmp_path, tiny_model_dir):
    ctx = DemoContext(output_dir=tmp_path / "out")
    assert trained_evaluator(ctx) is None
    folder = ctx.path("models", "tiny-trained")
    shutil.copytree(tiny_model_dir, folder)
    assert trained_evaluator(ctx) is None  # the toy evaluator: no recipe beside it
    ctx.path("models", "tiny-trained.yaml").write_text("max_steps: 1\n")
    assert trained_evaluator(ctx) == folder


def test_without_the_train_stages_evaluator_the_stage_says_so_and_trains_nothing(world_ctx, capsys):
    world_ctx.artifacts.pop("world_evaluator")
    stage_world_evaluator.run(world_ctx)
    assert "run the train stage" in capsys.readouterr().out
    assert "world_evaluator" not in world_ctx.artifacts
    assert not (world_ctx.output_dir / "world_data").exists()
