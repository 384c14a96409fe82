"""Fixtures of the world stages' tests: tiny world models, built once per session."""

from __future__ import annotations

import pytest

from demo.context import DemoContext
from demo.world_clip import WorldClipConfig, pretrain_world_clip
from demo.world_generator import GeneratorConfig, pretrain_world_generator

TINY_GENERATOR = GeneratorConfig(prompts=12, grids_per_prompt=1, vae_steps=4, steps=4, batch_size=4)


@pytest.fixture(scope="session")
def tiny_world_models(tmp_path_factory, tiny_model_dir) -> dict:
    """A tiny world generator, the tiny evaluator and a tiny world CLIP, as the
    ``ctx.artifacts`` the world stages read."""
    root = tmp_path_factory.mktemp("world_models")
    return {
        "world_generator": pretrain_world_generator(root / "gen", TINY_GENERATOR, progress=False),
        "world_evaluator": tiny_model_dir,
        "world_clip": pretrain_world_clip(
            root / "clip", WorldClipConfig(steps=2, batch_size=4), progress=False
        ),
    }


@pytest.fixture
def world_ctx(tmp_path, tiny_world_models, monkeypatch) -> DemoContext:
    """A demo context holding the tiny world models, with its own model cache."""
    monkeypatch.setenv("PACO_RL_CACHE", str(tmp_path / "cache"))
    ctx = DemoContext(output_dir=tmp_path / "out")
    ctx.artifacts.update(tiny_world_models)
    return ctx
