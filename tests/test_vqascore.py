"""VQAScore (CLIP-FlanT5): the formula against T5's own loss, one vision pass per image,
batching, the reference's checkpoint layouts, the plan, and bad input. The comparison with
t2v-metrics itself is tests/reference/test_ref_vqascore.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from paco_reward.errors import (
    InputError,
    InputTypeError,
    InvalidImageError,
    PacoError,
    UnsupportedModelError,
)
from paco_reward.testing.clip_t5 import TINY_TEXTS, build_tiny_clip_t5
from paco_reward.vqascore import VQAScore, expand2square, vqascore_components


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_clip_t5(tmp_path_factory.mktemp("tiny_clip_t5") / "model", seed=0)


@pytest.fixture(scope="module")
def scorer(tiny):
    return VQAScore.from_pretrained(tiny, tokenizer=tiny, dtype="float32", device="cpu")


def _image(w: int, h: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_score_is_the_geometric_mean_of_the_answer_and_end_token_probabilities(scorer):
    """exp(-mean CE) of [▁Yes, </s>], restated with T5's own loss on the reference's inputs:
    input ids with the image placeholder, the labels given to the model (it shifts them)."""
    image, texts = _image(40, 24), list(TINY_TEXTS[:3])
    ours = scorer.score([image], [texts])[0]
    pixels = scorer.pixel_values(image)
    labels = torch.tensor([scorer.tokenizer("Yes").input_ids])
    assert labels[0, -1].item() == scorer.tokenizer.eos_token_id and labels.shape[1] == 2
    vocabulary = len(scorer.tokenizer)
    for text, score in zip(texts, ours, strict=True):
        ids, mask = scorer.input_ids([text])
        with torch.no_grad():
            out = scorer.model(input_ids=ids, attention_mask=mask, pixel_values=pixels, labels=labels)
        # the reference's softmax is over the tokenizer's ids (its head shrunk to them)
        logits = out.logits[0, :, :vocabulary]
        ce = torch.nn.functional.cross_entropy(logits, labels[0])
        assert score == pytest.approx(float(torch.exp(-ce)), rel=1e-6)
        first = torch.softmax(logits[0], -1)[labels[0, 0]]
        assert score != pytest.approx(float(first), rel=1e-3)  # not P(Yes) alone


def test_one_vision_pass_per_image_and_batching_changes_nothing(tiny, scorer):
    calls = []
    handle = scorer.model.vision_tower.register_forward_hook(lambda *a: calls.append(1))
    try:
        images = [_image(40, 24, 1), _image(30, 30, 2)]
        texts = [list(TINY_TEXTS), list(TINY_TEXTS[:2])]
        batched = scorer.score(images, texts)
    finally:
        handle.remove()
    assert len(calls) == 2
    one_by_one = VQAScore.from_pretrained(tiny, tokenizer=tiny, dtype="float32", device="cpu", batch_size=1)
    for a, b in zip(batched, one_by_one.score(images, texts), strict=True):
        assert a.dtype == np.float64 and np.all((a > 0) & (a < 1))
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert len(np.unique(np.round(batched[0], 8))) == len(TINY_TEXTS)  # texts are told apart


def test_expand2square_pads_with_the_clip_mean_colour(scorer):
    assert scorer.background == (122, 116, 104)  # int(255 * OPENAI_CLIP_MEAN)
    wide = Image.new("RGB", (5, 2), (255, 0, 0))
    square = expand2square(wide, scorer.background)
    assert square.size == (5, 5)
    column = [square.getpixel((0, y)) for y in range(5)]
    assert column == [(122, 116, 104), (255, 0, 0), (255, 0, 0), (122, 116, 104), (122, 116, 104)]
    tall = expand2square(Image.new("RGB", (1, 3), (0, 0, 255)), (9, 9, 9))
    assert [tall.getpixel((x, 0)) for x in range(3)] == [(9, 9, 9), (0, 0, 255), (9, 9, 9)]


def test_the_reference_checkpoint_layouts_load(tiny, scorer, tmp_path):
    """The reference class saves a pickled state dict with the shared embedding under four
    names; a checkpoint may also lack the vision tower (then it comes from mm_vision_tower)."""
    from safetensors.torch import load_file, save_file

    state = load_file(tiny / "model.safetensors")
    image, texts = _image(24, 40, 3), list(TINY_TEXTS[:2])
    expected = scorer.score([image], [texts])[0]
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((tiny / "config.json").read_text())
    full = {**state, **{k: state["shared.weight"] for k in (
        "embed_tokens.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")}}  # fmt: skip
    torch.save(full, pickled / "pytorch_model.bin")
    without_tower = tmp_path / "without_tower"
    without_tower.mkdir()
    (without_tower / "config.json").write_text((tiny / "config.json").read_text())
    save_file({k: v for k, v in state.items() if not k.startswith("vision_tower.")},
              without_tower / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
    for folder in (pickled, without_tower):
        other = VQAScore.from_pretrained(folder, tokenizer=tiny, dtype="float32", device="cpu")
        np.testing.assert_allclose(other.score([image], [texts])[0], expected, rtol=1e-6)


def test_describe_names_the_protocol(scorer):
    info = scorer.describe()
    assert info["question_template"] == 'Does this figure show "{}"? Please answer yes or no.'
    assert info["answer"] == "Yes" and info["conversation"] == "t5_chat"
    assert info["dtype"] == "float32" and "</s>" in info["formula"]
    assert info["reference"].startswith("t2v_metrics@7c06208")
    json.dumps(info)


def test_bad_input_is_a_typed_error_and_no_text_is_no_score(scorer, tmp_path):
    assert scorer.score([], []) == []
    empty = scorer.score([_image(8, 8)], [[]])[0]
    assert empty.shape == (0,) and empty.dtype == np.float64
    with pytest.raises(InvalidImageError, match=r"images\[1\].*no image file"):
        scorer.score([_image(8, 8), tmp_path / "missing.png"], [["a"], ["b"]])
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"not a png")
    with pytest.raises(InvalidImageError, match=r"images\[0\].*not a readable image"):
        scorer.score([corrupt], [["a"]])
    with pytest.raises(InputError, match="one list of texts per image"):
        scorer.score([_image(8, 8)], [["a"], ["b"]])
    with pytest.raises(InputTypeError, match="not one string"):
        scorer.score([_image(8, 8)], ["a red fox"])


def test_a_folder_that_is_not_clip_flant5_is_refused(tiny, tmp_path):
    with pytest.raises(UnsupportedModelError, match="not a CLIP-FlanT5 model.*'clip'") as err:
        VQAScore.from_pretrained(tiny / "vision_tower", tokenizer=tiny)
    assert isinstance(err.value, PacoError) and isinstance(err.value, ValueError)
    with pytest.raises(PacoError, match="No model folder"):
        VQAScore.from_pretrained(tmp_path / "nothing", tokenizer=tiny)


def test_plan_counts_the_published_architecture():
    weights, forward = vqascore_components()
    # google/flan-t5-xxl (T5 v1.1 XXL, untied head: 11.14 B), CLIP ViT-L/14-336's vision
    # tower (303.5 M) and the mlp2x_gelu projector (1024 x 4096 + 4096 x 4096: 21.0 M)
    assert weights.parameters == pytest.approx(11.135e9 + 303.5e6 + 20.98e6, rel=1e-3)
    assert weights.bytes == 2 * weights.parameters and weights.kind == "reward"
    assert forward.kind == "activations" and forward.bytes > 0


@pytest.mark.parametrize("family", ["gemma3", "qwen2_5_vl"])
def test_the_formula_on_another_judge_step_by_step(family, tmp_path):
    """JudgeVQAScore against a restatement: P(Yes | prompt) from the prompt's last logits,
    P(end of turn | prompt + "Yes") from the prompt with "Yes" appended, their geometric mean."""
    from paco_reward.images import resize_for_model
    from paco_reward.transformers_backend import TransformersBackend
    from paco_reward.vqascore import QUESTION_TEMPLATE, JudgeVQAScore

    if family == "gemma3":
        from paco_reward.testing.gemma3 import build_tiny_gemma3 as build
    else:
        from paco_reward.testing.qwen import build_tiny_qwen2_5_vl as build
    backend = TransformersBackend.from_pretrained(build(tmp_path / family), device="cpu", dtype="float32")
    judge = JudgeVQAScore(backend)
    image, texts = _image(56, 40, 4), ["a red fox", "two cats on a blue sofa"]
    ours = judge.score([image], [texts])[0]
    tokenizer = backend.tokenizer
    yes, end = judge.answer_ids()
    assert tokenizer.convert_ids_to_tokens([yes])[0].lstrip("▁Ġ") == "Yes"
    assert end in tokenizer.all_special_ids  # the template's end of turn
    policy = getattr(backend, "image_policy", None)
    pil = resize_for_model(Image.fromarray(image), policy)
    kwargs = {"size": policy.processor_size} if policy is not None else {}
    for text, score in zip(texts, ours, strict=True):
        prompt = judge._texts(QUESTION_TEMPLATE.format(text))[0]
        probs = []
        for context, target in ((prompt, yes), (prompt + "Yes", end)):
            inputs = backend.processor(text=[context], images=[[pil]], add_special_tokens=False,
                                       return_tensors="pt", **kwargs)  # fmt: skip
            with torch.no_grad():
                logits = backend.model(**inputs).logits[0, -1]
            probs.append(float(torch.softmax(logits.float(), -1)[target]))
        assert score == pytest.approx(float(np.sqrt(probs[0] * probs[1])), rel=1e-4)
    info = judge.describe()
    assert "not the paper's VQAScore" in info["note"] and info["scored_tokens"][0].endswith("Yes")


@pytest.mark.slow
def test_the_docs_example_runs_as_written(tmp_path):
    """docs/scoring.md's VQAScore and aesthetics block, with the hub ids it names resolving
    offline to tiny stand-ins installed under those ids in a hub cache of the test's own."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from paco_reward.testing.aesthetics import build_tiny_aesthetic_predictor
    from paco_reward.testing.hub_cache import install_in_hub_cache

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "scoring.md").read_text()
    [code] = [c for c in re.findall(r"<!-- runnable -->\n```python\n(.*?)```", page, re.DOTALL)
              if "VQAScore" in c]  # fmt: skip
    hub = tmp_path / "hub"
    model = build_tiny_clip_t5(tmp_path / "clip_t5", seed=0)
    config = json.loads((model / "config.json").read_text())
    config["mm_vision_tower"] = "openai/clip-vit-large-patch14-336"
    (model / "config.json").write_text(json.dumps(config))
    install_in_hub_cache(model / "vision_tower", "openai/clip-vit-large-patch14-336", hub)
    install_in_hub_cache(model, "zhiqiulin/clip-flant5-xxl", hub)
    install_in_hub_cache(model, "google/flan-t5-xxl", hub)
    clip, head = build_tiny_aesthetic_predictor(tmp_path / "aesthetic", seed=0)
    install_in_hub_cache(clip, "openai/clip-vit-large-patch14", hub)
    head_repo = tmp_path / "head"
    head_repo.mkdir()
    (head_repo / "aesthetic-model.pth").write_bytes(head.read_bytes())
    install_in_hub_cache(head_repo, "trl-lib/ddpo-aesthetic-predictor", hub)
    work = tmp_path / "work"
    work.mkdir()
    Image.fromarray(_image(48, 32)).save(work / "panel.png")
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "not the paper's" in done.stdout and "exp(-mean cross-entropy" in done.stdout
