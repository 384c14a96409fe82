"""Baseline scorers, the tiny CLIP factory and scorer specs."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from benchmarks.common import build_scorer, parse_scorer_spec
from benchmarks.synthetic import shape_panel, shifted
from paco_reward.baselines import (
    CLIPImageScorer,
    DreamSimScorer,
    FunctionScorer,
    OpenCLIPScorer,
    PixelScorer,
)
from paco_reward.errors import InputError, InputTypeError, MissingDependencyError

RED = (200, 40, 40)


def test_pixel_scorer_known_values():
    black = np.zeros((16, 16, 3), np.uint8)
    white = np.full((16, 16, 3), 255, np.uint8)
    grey = np.full((16, 16, 3), 51, np.uint8)
    scores = PixelScorer(size=16).score_pairs([(black, black), (black, white), (black, grey, "p")])
    np.testing.assert_allclose(scores, [1.0, 0.0, 0.8])


def test_pixel_scorer_orders_colour_shifts():
    ref = shape_panel(RED, "circle")
    cands = [shape_panel(shifted(RED, d), "circle") for d in (0, 20, 50, 120)]
    scores = PixelScorer().score_pairs([(ref, c) for c in cands])
    assert scores[0] == 1.0
    assert np.all(np.diff(scores) < 0)


def test_clip_scorer_on_tiny_clip(tiny_clip_dir, tmp_path):
    scorer = CLIPImageScorer(tiny_clip_dir, device="cpu", batch_size=2)
    ref = shape_panel(RED, "circle")
    path = tmp_path / "ref.png"
    ref.save(path)
    others = [shape_panel((40, 40, 200), "square"), shape_panel(shifted(RED, 60), "triangle")]
    scores = scorer.score_pairs([(ref, path), (ref, others[0]), (others[1], ref), (ref, others[1])])
    assert scores.dtype == np.float64 and scores.shape == (4,)
    assert scores[0] == pytest.approx(1.0, abs=1e-6)  # same image, as PIL and as path
    assert scores[2] == pytest.approx(scores[3])  # cosine is symmetric
    assert np.all(scores[1:] < 1.0 - 1e-6) and np.all(scores >= -1.0)
    # Embeddings match a direct CLIPModel forward pass.
    import torch
    from transformers import CLIPModel, CLIPProcessor

    model = CLIPModel.from_pretrained(tiny_clip_dir).eval()
    processor = CLIPProcessor.from_pretrained(tiny_clip_dir)
    with torch.no_grad():
        feats = model.get_image_features(**processor(images=[ref, others[0]], return_tensors="pt"))
    feats = torch.nn.functional.normalize(feats.pooler_output, dim=-1)
    assert scores[1] == pytest.approx(float(feats[0] @ feats[1]), abs=1e-5)


def test_tiny_clip_is_seeded_and_has_a_trained_tokenizer(tiny_clip_dir, tmp_path):
    from transformers import CLIPTokenizer

    from paco_reward.testing.clip import build_tiny_clip

    tokenizer = CLIPTokenizer.from_pretrained(tiny_clip_dir)
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("A red circle")["input_ids"])
    assert tokens == ["<|startoftext|>", "a</w>", "red</w>", "circle</w>", "<|endoftext|>"]
    again = build_tiny_clip(tmp_path / "again", seed=0)
    ref, other = shape_panel(RED), shape_panel((10, 200, 10), "square")
    a = CLIPImageScorer(tiny_clip_dir).score_pairs([(ref, other)])
    b = CLIPImageScorer(again).score_pairs([(ref, other)])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_function_scorer_and_bad_pairs():
    scorer = FunctionScorer(lambda a, b: a.size[0] / b.size[0])
    small, big = Image.new("RGB", (4, 4)), Image.new("RGB", (8, 8))
    assert scorer.score_pairs([(small, big)]).tolist() == [0.5]
    with pytest.raises(InputTypeError, match=r"pairs\[0\] must be \(image_a, image_b"):
        PixelScorer().score_pairs([small])
    with pytest.raises(InputError, match="size=0 must be a positive"):
        PixelScorer(size=0)


@pytest.mark.parametrize(
    ("cls", "module", "args"),
    [(DreamSimScorer, "dreamsim", ()), (OpenCLIPScorer, "open_clip", ("ViT-B-32",))],
)
def test_optional_adapters_explain_missing_package(monkeypatch, cls, module, args):
    monkeypatch.setitem(sys.modules, module, None)  # import of it raises ImportError
    with pytest.raises(MissingDependencyError, match=f"optional package '{module}'.*pip install"):
        cls(*args)


def test_scorer_specs(tiny_clip_dir):
    assert parse_scorer_spec("ours=paco:/m") == ("ours", "paco", "/m")
    assert parse_scorer_spec("clip:/a=b") == (None, "clip", "/a=b")
    assert build_scorer("pixel:32").scorer.size == 32
    named = build_scorer(f"mine=clip:{tiny_clip_dir}")
    assert named.name == "mine" and isinstance(named.scorer, CLIPImageScorer)
    with pytest.raises(ValueError, match="kind must be one of"):
        parse_scorer_spec("lpips")
    with pytest.raises(ValueError, match="needs an argument"):
        parse_scorer_spec("paco")
