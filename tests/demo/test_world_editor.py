"""The world's editor: edits change exactly the asked attribute, the oracle reads their
renders as their ground truth, and the editor is an ordinary FluxKontextPipeline folder
(diffusers' own pipeline edits as sample_edits does) that starts from the generator."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from data_pipeline.synthetic import ATTRIBUTES
from demo.cached_folder import read_info
from demo.world_editor import (
    HELD_OUT_START,
    INFO_FILE,
    INSTRUCTIONS,
    EditorConfig,
    editor_world,
    judge_edits,
    make_edits,
    pretrain_world_editor,
    render_edit,
    sample_edits,
)
from demo.world_generator import GeneratorConfig, generator_world

TINY_EDITOR = EditorConfig(edits=12, steps=3, batch_size=4)


@pytest.fixture(scope="module")
def generator(tiny_world_models):
    return tiny_world_models["world_generator"]


@pytest.fixture(scope="module")
def editor(generator, tmp_path_factory):
    out = tmp_path_factory.mktemp("editor") / "kontext"
    return pretrain_world_editor(out, generator, TINY_EDITOR, progress=False)


def test_an_edit_changes_exactly_the_asked_attribute():
    world = generator_world(GeneratorConfig())
    records = make_edits(world, 30, start=HELD_OUT_START)
    assert Counter(r["attribute"] for r in records) == dict.fromkeys(INSTRUCTIONS, 10)
    for r in records:
        differs = [a for a in (*ATTRIBUTES, "step") if r["source"][a] != r["target"][a]]
        assert differs == [r["attribute"]]
        assert r["target"][r["attribute"]] == r["value"]
        assert str(r["value"]) in r["prompt"]
    assert make_edits(world, 30, start=HELD_OUT_START) == records
    assert {r["id"] for r in make_edits(world, 30)}.isdisjoint(r["id"] for r in records)


def test_the_oracle_reads_the_renders_of_edits_as_their_ground_truth():
    world = generator_world(GeneratorConfig())
    records = make_edits(world, 60, start=HELD_OUT_START)
    pairs = [render_edit(world, r) for r in records]
    targets = judge_edits([t for _, t in pairs], records)
    sources = judge_edits([s for s, _ in pairs], records)
    assert targets["changed"] == 1.0 and targets["kept"] > 0.95 and targets["success"] > 0.8
    assert sources["changed"] == 0.0 and sources["success"] == 0.0
    assert sources["kept"] == pytest.approx(targets["kept"], abs=0.03)
    assert set(targets["by_attribute"]) == set(INSTRUCTIONS)
    with pytest.raises(ValueError, match="one image per record"):
        judge_edits([pairs[0][1]], records)


def test_diffusers_kontext_pipeline_edits_what_sample_edits_draws(generator, editor):
    from diffusers import FluxKontextPipeline

    pipe = FluxKontextPipeline.from_pretrained(editor)
    world = editor_world(generator)
    records = make_edits(world, 2, start=HELD_OUT_START)
    ours = sample_edits(pipe, records, world, seed=5, num_steps=4)
    # diffusers draws one edit's noise, the first rows of what a batch of two draws.
    (theirs,) = pipe(
        image=render_edit(world, records[0])[0],
        prompt=records[0]["prompt"],
        height=32,
        width=32,
        num_inference_steps=4,
        guidance_scale=3.5,
        generator=torch.Generator().manual_seed(5),
        max_sequence_length=TINY_EDITOR.max_sequence_length,
        max_area=32 * 32,
        _auto_resize=False,
    ).images
    assert [im.size for im in ours] == [(32, 32)] * 2
    assert np.abs(np.asarray(ours[0], dtype=int) - np.asarray(theirs, dtype=int)).max() <= 1


def test_the_editor_starts_from_the_generator_and_trains_its_transformer(generator, editor):
    from diffusers import FluxKontextPipeline, FluxPipeline

    gen = FluxPipeline.from_pretrained(generator)
    edit = FluxKontextPipeline.from_pretrained(editor)
    for name in ("vae", "text_encoder", "text_encoder_2"):
        ours, theirs = getattr(edit, name).state_dict(), getattr(gen, name).state_dict()
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs), name
    changed = [
        not torch.equal(a, b)
        for a, b in zip(
            edit.transformer.state_dict().values(), gen.transformer.state_dict().values()
        )
    ]
    assert any(changed)
    assert edit.vae.config.shift_factor == gen.vae.config.shift_factor
    info = read_info(editor, INFO_FILE)
    assert info["key"] == TINY_EDITOR.key(generator) and len(info["loss_every_25_steps"]) == 1
    # A finished editor is reused; another editor config is another key.
    weights = editor / "transformer" / "diffusion_pytorch_model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert pretrain_world_editor(editor, generator, TINY_EDITOR, progress=False) == editor
    assert weights.stat().st_mtime_ns == stamp
    assert TINY_EDITOR.key(generator) != EditorConfig(steps=4).key(generator)
