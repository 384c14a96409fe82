"""The world's CLIP learns from the texts the CLIP-T reward reads, and learns them."""

from __future__ import annotations

import json

from data_pipeline.synthetic import PanelSpec
from demo.world_clip import WorldClipConfig, panel_text, pretrain_world_clip
from demo.world_generator import GeneratorConfig, generator_world
from paco_reward.grids import split_panel_prompts


def test_a_panels_text_is_the_global_description_then_its_panel_description():
    (record,) = generator_world(GeneratorConfig()).make_prompts(1)
    global_text, panels = split_panel_prompts(record["prompt"])
    attributes = record["synthetic"]["attributes"]
    for step, description in enumerate(panels):
        spec = PanelSpec(step=step, **attributes)
        assert panel_text(spec) == f"{global_text} {description}"


def test_contrastive_training_lowers_the_loss_and_is_cached(tmp_path):
    config = WorldClipConfig(steps=60, batch_size=16)
    path = pretrain_world_clip(tmp_path / "clip", config, progress=False)
    info = json.loads((path / "world_clip.json").read_text())
    losses = info["loss_every_25_steps"]
    assert losses[-1] < losses[0] - 0.1, losses
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert pretrain_world_clip(path, config, progress=False) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
