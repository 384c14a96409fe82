"""What a GRPO run writes for people: captioned sample grids a person can see, progress within
an epoch, and one numbering of epochs in metrics, sample files and checkpoints."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from PIL import Image, ImageFont

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.testing.flux import build_tiny_flux
from paco_grpo.tracking import (
    FONT_SIZE,
    MIN_PANEL_SIDE,
    PROMPT_LINES,
    _caption_lines,
    sample_caption,
    save_image_grid,
)
from paco_reward.errors import InputError

RECIPE = "recipes/grpo_tiny_cpu.yaml"
LONG = "a four-panel story of a small red fox crossing a snowy birch forest at dawn " * 3


def _dark_rows(path, top: int, bottom: int) -> int:
    """Rows of ``path`` between ``top`` and ``bottom`` holding a dark (text) pixel."""
    grey = np.asarray(Image.open(path).convert("L"))[top:bottom]
    return int((grey < 100).any(axis=1).sum())


def test_sample_caption_names_every_reward_and_marks_a_failed_one():
    text = sample_caption("a fox", {"consistency": 0.51234, "clip_t": float("nan")}, -0.25)
    assert text.splitlines() == ["a fox", "consistency 0.5123", "clip_t failed", "advantage -0.250"]


def test_a_long_prompt_is_wrapped_and_cut_to_its_line_budget():
    font = ImageFont.load_default(size=FONT_SIZE)
    lines = _caption_lines(sample_caption(LONG, {"consistency": 0.5}), font, 248)
    assert len(lines) == PROMPT_LINES + 1 and lines[-1] == "consistency 0.5000"
    assert lines[PROMPT_LINES - 1].endswith("…")
    assert all(font.getlength(line) <= 248 for line in lines)
    # a word wider than the panel is cut by characters, not drawn past the edge
    assert all(font.getlength(x) <= 40 for x in _caption_lines("x" * 60, font, 40))


def test_tiny_images_are_upscaled_with_their_captions_below(tmp_path):
    images = [torch.rand(3, 32, 32) for _ in range(6)]
    captions = [sample_caption(f"prompt {i}", {"consistency": i / 10}) for i in range(6)]
    path = tmp_path / "grid.png"
    save_image_grid(images, path, captions, columns=3)
    grid = Image.open(path)
    rows, cols = 2, 3
    panel_w = (grid.width - 4) // cols - 4
    assert panel_w == MIN_PANEL_SIDE  # 32 px x 8, nearest neighbour
    assert (grid.height - 4) // rows - 4 > MIN_PANEL_SIDE  # room for the caption band
    # the upscaled panel keeps its pixels: an 8x8 block is one colour
    block = np.asarray(grid)[4 : 4 + 8, 4 : 4 + 8].reshape(-1, 3)
    assert (block == block[0]).all()
    band = 4 + MIN_PANEL_SIDE
    assert _dark_rows(path, band, band + 2 * (FONT_SIZE + 4) + 8) > 8  # two lines of text
    with pytest.raises(InputError, match="6 images but 2 captions"):
        save_image_grid(images, path, captions[:2])


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)


def test_a_run_counts_epochs_from_one_everywhere_and_reports_each_phase(flux_dir, tmp_path, caplog):
    overrides = {
        "model_name_or_path": str(flux_dir),
        "output_dir": str(tmp_path),
        "report_to": [],
        "num_train_epochs": 2,
        "prompts_per_epoch": 2,
        "num_generations": 4,
        "sample_batch_size": 4,
        "per_device_train_batch_size": 8,
        "num_iterations": 1,
        "num_sample_images": 8,
        "save_epochs": 1,
        "test.eval_epochs": 2,
        "test.num_prompts": 2,
    }
    cfg = GRPOConfig.from_yaml(RECIPE, overrides)
    with caplog.at_level(logging.INFO, logger="paco_grpo.grpo_trainer"):
        history = GRPOTrainer(cfg).train()
    # metrics, sample grids and checkpoints: epoch n is the n-th epoch, checkpoint-n after it
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [r["epoch"] for r in history] == [1, 2]
    samples = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert samples == ["eval_epoch_00002.png", "train_epoch_00001.png", "train_epoch_00002.png"]
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint-00001", "checkpoint-00002"]
    # a training grid: 8 images of 32 px at >= 256 px, 4 a row (a group), text below each
    grid = Image.open(tmp_path / "samples" / "train_epoch_00001.png")
    assert grid.width == 4 + 4 * (MIN_PANEL_SIDE + 4)
    assert (grid.height - 4) // 2 - 4 > MIN_PANEL_SIDE
    band = 4 + MIN_PANEL_SIDE
    assert _dark_rows(tmp_path / "samples" / "train_epoch_00001.png", band, band + 60) > 8
    # the eval grid (64 px test resolution) is upscaled too
    assert Image.open(tmp_path / "samples" / "eval_epoch_00002.png").width >= MIN_PANEL_SIDE
    # progress within each epoch, at INFO (shown with -v)
    messages = [r.getMessage() for r in caplog.records if r.name == "paco_grpo.grpo_trainer"]
    for epoch in (1, 2):
        for phase in ("sampling (8)", "rewards (2)", "training (1)"):
            assert f"epoch {epoch}/2: {phase}" in messages, (epoch, phase, messages)
    assert "epoch 2/2: evaluation" in messages and "epoch 1/2: evaluation" not in messages
