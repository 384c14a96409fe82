"""The world's generator: an ordinary FluxPipeline folder (diffusers' own pipeline draws what
sample_grids draws), cached by configuration, with whole-word prompt tokens; and the oracle's
judgement of grids against the world's ground truth."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import torch
from PIL import Image

from demo.world_generator import (
    GeneratorConfig,
    generator_world,
    held_out_prompts,
    pretrain_world_generator,
    read_generator_info,
    sample_grids,
    scheduled_lr,
    world_words,
)
from demo.world_judge import judge_grids

TINY = GeneratorConfig(prompts=12, grids_per_prompt=1, vae_steps=4, steps=4, batch_size=4)


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    return pretrain_world_generator(
        tmp_path_factory.mktemp("gen") / "world-flux", TINY, progress=False
    )


@pytest.mark.parametrize("side", [64, 32], ids=["evaluation size", "half size"])
def test_diffusers_flux_pipeline_draws_what_sample_grids_draws(generator, side):
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(generator)
    records = held_out_prompts(TINY, 2)
    ours = sample_grids(pipe, records, seed=3, num_steps=4, size=side)
    theirs = pipe(
        [r["prompt"] for r in records],
        height=side,
        width=side,
        num_inference_steps=4,
        guidance_scale=3.5,
        max_sequence_length=64,
        generator=torch.Generator().manual_seed(3),
        output_type="pil",
    ).images
    assert [im.size for im in ours] == [(side, side)] * 2
    for a, b in zip(ours, theirs):
        assert np.abs(np.asarray(a, dtype=int) - np.asarray(b, dtype=int)).max() <= 1


def test_a_finished_generator_is_reused_and_a_new_config_retrains(generator):
    weights = generator / "transformer" / "diffusion_pytorch_model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert pretrain_world_generator(generator, TINY, progress=False) == generator
    assert weights.stat().st_mtime_ns == stamp
    assert GeneratorConfig(steps=5).key() != GeneratorConfig(steps=4).key()
    info = read_generator_info(generator)
    assert info["key"] == TINY.key() and len(info["flow_loss_every_25_steps"]) == 1
    assert not (generator.parent / (generator.name + ".partial")).exists()


def test_every_word_of_a_prompt_is_one_t5_token(generator):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.fspath(generator / "tokenizer_2"))
    words = world_words(generator_world(TINY))
    assert {"diamond", "neutral-toned", "[TOP]-[LEFT]:The"} <= set(words)
    prompt = held_out_prompts(TINY, 1)[0]["prompt"]
    tokens = tokenizer.tokenize(prompt)
    assert len(tokens) == len(prompt.split()) + prompt.count(".") + prompt.count(",")


def test_the_judge_reads_the_worlds_renders_as_their_ground_truth():
    from data_pipeline.world_oracle import grid_consistency, prompt_alignment

    world = generator_world(GeneratorConfig())
    records = world.make_prompts(24)
    images = [world.render_grid(r, 1) for r in records]
    judged = judge_grids(images, records)
    truth = [world.panel_specs(r, 1) for r in records]
    consistency = [grid_consistency(t) for t in truth]
    alignment = [prompt_alignment(t, r["synthetic"]["attributes"]) for t, r in zip(truth, records)]
    got = judged["per_item"]
    # The oracle misreads a few 32-px textures; the grids' scores follow the ground truth.
    assert np.corrcoef([g["consistency"] for g in got], consistency)[0, 1] > 0.9
    assert np.mean([g["alignment"] for g in got]) == pytest.approx(np.mean(alignment), abs=0.03)
    assert judged["unreadable_panels"] == 0 and judged["consistency_se"] > 0


def test_one_picture_in_every_panel_is_consistent_and_has_no_diversity():
    world = generator_world(GeneratorConfig())
    records = world.make_prompts(12)
    steps = [[spec.step for spec in world.panel_specs(r, 1)] for r in records]
    story = judge_grids([world.render_grid(r, 1) for r in records], records)
    # the renders tell a story (a few break it on purpose): the pairs with other pip counts
    differ = [np.mean([a != b for a, b in itertools.combinations(s, 2)]) for s in steps]
    assert 0.9 < np.mean(differ) < 1
    assert story["diversity"] == pytest.approx(np.mean(differ), abs=0.03)
    repeated = []
    for r in records:
        grid = world.render_grid(r, 1)
        first = grid.crop((0, 0, 32, 32))
        for x, y in ((32, 0), (0, 32), (32, 32)):
            grid.paste(first, (x, y))
        repeated.append(grid)
    hacked = judge_grids(repeated, records)
    assert hacked["diversity"] == 0.0 and hacked["consistency"] == 1.0
    assert hacked["alignment"] < story["alignment"]  # three panels show the wrong step
    assert [set(item) for item in hacked["per_item"]] == [{"consistency", "alignment", "diversity"}] * 12


def test_an_unreadable_panel_scores_nothing_instead_of_being_left_out():
    world = generator_world(GeneratorConfig())
    (record,) = world.make_prompts(1)
    grid = world.render_grid(record, 0)
    grid.paste(Image.new("RGB", (32, 32), (128, 128, 128)), (32, 32))  # bottom-right: blank
    judged = judge_grids([grid], [record])
    assert judged["unreadable_panels"] == 1
    full = judge_grids([world.render_grid(record, 0)], [record])
    assert judged["consistency"] < full["consistency"]
    assert judged["alignment"] <= full["alignment"] - 7 / 28 + 1e-9
    with pytest.raises(ValueError, match="one image per record"):
        judge_grids([grid], [record, record])


def test_the_learning_rate_warms_up_holds_then_decays_linearly_to_zero():
    # 100 steps at 2.0: 10 warm-up steps, the last 30 % decayed (values worked out by hand).
    lr = [scheduled_lr(step, 2.0, 10, total_steps=100, decay=0.3) for step in range(100)]
    assert lr[0] == pytest.approx(0.2) and lr[4] == pytest.approx(1.0)
    assert lr[9] == lr[50] == lr[70] == 2.0
    assert lr[85] == pytest.approx(1.0) and lr[99] == pytest.approx(2.0 / 30)
    assert all(a >= b for a, b in zip(lr[9:], lr[10:]))
    # Without decay (the editor's schedule), the rate holds after the warm-up.
    assert scheduled_lr(99, 2.0, 10) == scheduled_lr(99, 2.0, 10, total_steps=100) == 2.0
