"""A judge of another family in-process: a tiny Gemma-3 scores through its own processor
(``ProcessorBackend``), equal to the model card's transformers forward, with each image
through the vision tower once where the family allows it and a plain batched forward where
it does not (pan-and-scan crops) or is told not to; what only Qwen-VL takes is refused before
the weights load."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from paco_reward import PacoReward, UnsupportedModelError
from paco_reward.local_backend import LocalBackend
from paco_reward.processor_backend import ProcessorBackend
from paco_reward.templates import render_instruction
from paco_reward.testing.gemma3 import model_card_score

# float32 on the CPU: the batched, left-padded forwards against one forward per pair.
EXACT = 1e-6
THEMES = ["a red fox", "a blue bird in the sky", "a fox"]  # three prompt lengths: padding


def _reference(folder):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoModelForImageTextToText.from_pretrained(
        folder
    ).eval(), AutoProcessor.from_pretrained(folder)


def _pairs(images):
    return [
        (images[i], images[j], THEMES[(i + j) % len(THEMES)])
        for i in range(len(images))
        for j in range(len(images))
        if i != j
    ]


def _direct(model, processor, pairs) -> np.ndarray:
    return np.array(
        [
            model_card_score(model, processor, a, b, render_instruction("consistency", theme))
            for a, b, theme in pairs
        ]
    )


def _vision_rows(model):
    """A counter of the images the vision tower sees (rows of ``pixel_values``)."""
    seen = []
    tower = model.model.vision_tower
    handle = tower.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["pixel_values"].shape[0]),
        with_kwargs=True,
    )
    return seen, handle


def test_gemma3_scores_equal_the_model_card_forward(tiny_gemma3_dir, random_images):
    """PacoReward.from_pretrained on a Gemma-3 folder: the processor-driven backend, images
    passed as they are (the processor resizes them), every pair's score equal to the model
    card's forward, and each distinct image through the vision tower once."""
    rm = PacoReward.from_pretrained(tiny_gemma3_dir, canonical_yes_no=False, batch_size=4)
    assert type(rm.backend) is ProcessorBackend
    assert type(rm.backend.model).__name__ == "Gemma3ForConditionalGeneration"
    assert rm.backend.image_policy is None and rm.backend.reuses_vision
    images = [
        *random_images(2, size=(64, 64), seed=1),
        *random_images(1, size=(150, 60), seed=2),
        *random_images(1, size=(33, 97), seed=3),
    ]
    pairs = _pairs(images)  # 12 pairs, 3 chunks, prompts of 3 lengths
    seen, handle = _vision_rows(rm.backend.model)
    try:
        ours = rm.score_pairs(pairs)
    finally:
        handle.remove()
    assert sum(seen) == len(images)  # 4 images, not 24 occurrences
    expected = _direct(*_reference(tiny_gemma3_dir), pairs)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=EXACT)
    assert np.ptp(expected) > 0.05, "scores barely differ; the comparison would prove little"


def test_gemma3_set_symmetric_and_explain(tiny_gemma3_dir, random_images):
    """score_set, the symmetric average and explain through the same backend: the set's pair
    scores are the model card's, and explain's text is transformers' greedy generation."""
    rm = PacoReward.from_pretrained(tiny_gemma3_dir, canonical_yes_no=False)
    model, processor = _reference(tiny_gemma3_dir)
    a, b, c = random_images(3, size=(80, 48), seed=4)
    instruction = render_instruction("consistency", THEMES[0])
    result = rm.score_set([a, b, c], THEMES[0])
    direct = [
        model_card_score(model, processor, x, y, instruction) for x, y in [(a, b), (a, c), (b, c)]
    ]
    np.testing.assert_allclose(result.scores, direct, rtol=0, atol=EXACT)
    both = rm.score(a, b, THEMES[0], symmetric=True)
    backward = model_card_score(model, processor, b, a, instruction)
    assert both == pytest.approx((direct[0] + backward) / 2, abs=EXACT)

    judgement = rm.explain(a, b, THEMES[0], max_new_tokens=6)
    content = [{"type": "image", "image": a}, {"type": "image", "image": b}]
    inputs = processor.apply_chat_template(
        [{"role": "user", "content": [*content, {"type": "text", "text": instruction}]}],
        tokenize=True,
        return_dict=True,
        add_generation_prompt=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    expected = processor.tokenizer.decode(
        out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
    )
    assert judgement.text == expected
    assert judgement.score == pytest.approx(direct[0], abs=EXACT)


def test_the_plain_batched_forward_equals_the_model_card_forward(tiny_gemma3_dir, random_images):
    """Without the vision reuse the tower sees every image of every pair, and the scores are
    the same model card forward's."""
    model, processor = _reference(tiny_gemma3_dir)
    backend = ProcessorBackend(
        model, processor, canonical_yes_no=False, batch_size=3, reuse_vision=False
    )
    images = [*random_images(2, size=(64, 64), seed=5), *random_images(1, size=(40, 90), seed=6)]
    pairs = _pairs(images)
    seen, handle = _vision_rows(model)
    try:
        ours = PacoReward(backend).score_pairs(pairs)
    finally:
        handle.remove()
    assert sum(seen) == 2 * len(pairs)
    np.testing.assert_allclose(ours, _direct(model, processor, pairs), rtol=0, atol=EXACT)


def test_images_whose_tokens_depend_on_the_image_take_the_plain_forward(
    tiny_gemma3_dir, random_images
):
    """Pan-and-scan (a processor setting, off by default) crops an elongated image into
    squares, each with its own image tokens: the processor gives more pixel rows than images,
    so the call falls back to the plain forward, which still equals the model card's."""
    model, processor = _reference(tiny_gemma3_dir)
    processor.images_kwargs = {
        **processor.images_kwargs,
        "do_pan_and_scan": True,
        "pan_and_scan_min_crop_size": 32,
        "pan_and_scan_min_ratio_to_activate": 1.2,
    }
    backend = ProcessorBackend(model, processor, canonical_yes_no=False)
    wide, *square = [*random_images(1, size=(128, 64), seed=7), *random_images(2, seed=8)]
    assert backend.encode_images(square) is not None  # squares: no crop, reusable
    assert backend.encode_images([wide, *square]) is None  # the wide one: 2 crops
    pairs = _pairs([wide, *square])
    seen, handle = _vision_rows(model)
    try:
        ours = PacoReward(backend).score_pairs(pairs)
    finally:
        handle.remove()
    assert sum(seen) == 2 * len(pairs) + 4 * 2  # every occurrence; the wide one's 2 crops x 4
    np.testing.assert_allclose(ours, _direct(model, processor, pairs), rtol=0, atol=EXACT)


def test_what_only_qwen_vl_takes_fails_before_the_weights_load(tiny_gemma3_dir, tmp_path):
    """A pixel budget, or the Qwen-VL backend by name, for a Gemma-3 folder whose weights are
    gone: both refused naming the reason, so neither got as far as reading weights."""
    import shutil

    folder = tmp_path / "no-weights"
    shutil.copytree(tiny_gemma3_dir, folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"max_pixels=.*Gemma3ImageProcessor has none"):
        PacoReward.from_pretrained(folder, max_pixels=64 * 64)
    with pytest.raises(UnsupportedModelError, match=r"'gemma3' model.*SiglipVisionModel.*ProcessorBackend"):
        LocalBackend.from_pretrained(folder)
