"""Editing inputs: references resized preserving their aspect ratio, editing items (one or
several references), the editing sampler's input checks. (Each editing sampler against its
diffusers pipeline, and its recorded steps, are in test_grpo_pipelines.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import FluxKontextPipeline
from PIL import Image

from paco_grpo.data import PromptItem
from paco_grpo.pipelines import (
    KontextGRPOSampler,
    area_preserving_size,
    prepare_edit_items,
    resize_to_area,
)
from paco_reward.errors import InputError, PromptError
from paco_reward.images import image_hash


def _image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


# ---------------------------------------------------------------- reference resizing
@pytest.mark.parametrize(
    "size, area, multiple",
    [((1600, 900), 384 * 384, 16), ((900, 1600), 384 * 384, 16), ((640, 480), 1024**2, 16),
     ((333, 1000), 512 * 512, 32), ((2000, 2000), 384 * 384, 16)],
)  # fmt: skip
def test_area_preserving_size_keeps_aspect_ratio_and_area(size, area, multiple):
    w, h = area_preserving_size(*size, area, multiple)
    assert w % multiple == 0 and h % multiple == 0
    # each side within half a multiple of the exact aspect-preserving side
    exact_w, exact_h = (area * size[0] / size[1]) ** 0.5, (area * size[1] / size[0]) ** 0.5
    assert abs(w - exact_w) <= multiple / 2 and abs(h - exact_h) <= multiple / 2
    assert abs(w * h / area - 1) < 0.1
    assert abs((w / h) / (size[0] / size[1]) - 1) < 0.1


def test_area_preserving_size_examples_and_validation():
    assert area_preserving_size(1600, 900, 384 * 384, 16) == (512, 288)
    assert area_preserving_size(1024, 1024, 384 * 384, 16) == (384, 384)
    assert area_preserving_size(4000, 10, 32 * 32, 16) == (640, 16)  # never below one multiple
    with pytest.raises(InputError, match="must be >= 1; got 0, 10"):
        area_preserving_size(0, 10, 100, 16)


def test_resize_to_area_returns_resized_pil():
    wide = resize_to_area(_image(200, 100), 32 * 32)
    assert wide.size == (48, 16) and wide.mode == "RGB"
    same = _image(64, 32)
    assert resize_to_area(same, 64 * 32, 16) is not same or same.size == (64, 32)
    assert resize_to_area(np.zeros((40, 40, 3), dtype=np.uint8), 32 * 32).size == (32, 32)


def test_prepare_edit_items_resizes_and_hashes_the_original():
    source = _image(120, 60)
    items = prepare_edit_items(
        [PromptItem("0", "make it red", metadata={"source_image": source, "other": 1})], 32 * 32
    )
    meta = items[0].metadata
    assert meta["source_image"].size == (48, 16) and meta["other"] == 1
    assert meta["source_image_hash"] == image_hash(source)
    with pytest.raises(PromptError, match="'7' has no metadata\\['source_image'\\]"):
        prepare_edit_items([PromptItem("7", "x")], 32 * 32)


# ---------------------------------------------------------------- input checks
@pytest.fixture(scope="module")
def kontext(tiny_pipeline_dir):
    pipe = FluxKontextPipeline.from_pretrained(tiny_pipeline_dir("flux_kontext"))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_edit_sampler_input_validation(kontext):
    sampler = KontextGRPOSampler(kontext, max_sequence_length=32)
    square, wide = _image(32, 32), _image(64, 32)
    with pytest.raises(InputError, match="Got 2 prompts but 1 reference images"):
        sampler(["a", "b"], [square], num_steps=2)
    with pytest.raises(InputError, match="resize to different sizes"):
        sampler(["a", "b"], [square, wide], area=32 * 32, num_steps=2)
    with pytest.raises(InputError, match=r"noise_steps \[3\] must lie in \[0, 1\]"):
        sampler(["a"], [square], num_steps=2, noise_steps=[3])
    with pytest.raises(InputError, match="multiples of 16; got 40x32"):
        sampler(["a"], [square], height=40, num_steps=2)
    with pytest.raises(ValueError, match=r"images\[0\] holds 2 reference images; "
                       "KontextGRPOSampler edits from one per prompt"):  # fmt: skip
        sampler(["a"], [[square, square]], num_steps=2)
    with pytest.raises(ValueError, match="KontextGRPOSampler edits reference images"):
        sampler(["a"], num_steps=2)


def test_a_multi_reference_item_keeps_its_references_in_order():
    """Each reference is resized to the area with its own aspect ratio; the first is the
    image being edited; the group key hashes them all, in order."""
    from paco_grpo.data import references_hash

    first, second = _image(120, 60, seed=1), _image(60, 60, seed=2)
    metadata = {"source_image": first, "source_images": [first, second]}
    (item,) = prepare_edit_items([PromptItem("0", "put the cat in the room", metadata=metadata)],
                                 32 * 32)  # fmt: skip
    meta = item.metadata
    assert [im.size for im in meta["source_images"]] == [(48, 16), (32, 32)]
    assert meta["source_image"] is meta["source_images"][0]
    assert meta["source_image_hash"] == references_hash([first, second])
    assert references_hash([first, second]) not in {
        image_hash(first),
        references_hash([second, first]),
    }


def test_references_of_several_sizes_are_run_one_layout_at_a_time(tiny_pipeline_dir):
    """Qwen-Image-Edit-Plus: a batch whose second references differ in size calls the
    transformer once per reference layout; each edit's velocity is the one it has alone."""
    from diffusers import QwenImageEditPlusPipeline

    from paco_grpo.pipelines import QwenImageEditPlusGRPOSampler
    from paco_grpo.pipelines.qwen_image_edit_plus import ReferenceGroups

    pipe = QwenImageEditPlusPipeline.from_pretrained(tiny_pipeline_dir("qwen_image_edit_plus"))
    sampler = QwenImageEditPlusGRPOSampler(pipe)
    prompts = ["put the cat in the room", "put the lamp in the room", "add the hat"]
    references = [
        [_image(64, 64, 1), _image(64, 64, 2)],
        [_image(64, 64, 3), _image(64, 128, 4)],  # a tall second reference
        [_image(64, 64, 5), _image(64, 64, 6)],
    ]
    cond = sampler.condition(prompts, 64, 64, 4.0, references)
    assert isinstance(cond, ReferenceGroups) and [rows for rows, _ in cond.groups] == [[0, 2], [1]]
    channels = pipe.transformer.config.in_channels  # one packed token at 64x64 (32x VAE)
    latents = torch.randn(3, 1, channels, generator=torch.Generator().manual_seed(0))
    timestep = torch.tensor([900.0, 500.0, 100.0])
    with torch.no_grad():
        batch = sampler.transition_velocity(pipe.transformer, latents, timestep, prompts, 64, 64,
                                            4.0, references)  # fmt: skip
        for k in range(3):
            alone = sampler.transition_velocity(
                pipe.transformer, latents[k : k + 1], timestep[k : k + 1], prompts[k : k + 1],
                64, 64, 4.0, references[k : k + 1],
            )  # fmt: skip
            torch.testing.assert_close(batch[k : k + 1], alone, rtol=1e-5, atol=1e-6)
