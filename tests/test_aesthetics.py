"""The LAION aesthetic predictor restated by hand (CLIP's projected image embedding, L2
normalised, through the five linear layers in numpy), its protocol and its errors. The
comparison with Flow-GRPO's released scorer is tests/reference/test_ref_aesthetics.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from paco_reward.aesthetics import AestheticScorer, LaionAestheticPredictor
from paco_reward.errors import InvalidImageError, PathNotFoundError, WeightsMismatchError
from paco_reward.testing.aesthetics import build_tiny_aesthetic_predictor


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_aesthetic_predictor(tmp_path_factory.mktemp("aesthetic"), seed=0)


@pytest.fixture(scope="module")
def predictor(tiny):
    return LaionAestheticPredictor.from_pretrained(*tiny, device="cpu")


def _images(n: int = 3) -> list[np.ndarray]:
    return [np.random.default_rng(k).integers(0, 256, (40, 30, 3), dtype=np.uint8) for k in range(n)]


def test_ratings_equal_a_hand_computation(tiny, predictor):
    from transformers import CLIPModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    clip_dir, head_file = tiny
    images = _images()
    pixels = CLIPImageProcessorPil.from_pretrained(clip_dir)(images, return_tensors="pt")["pixel_values"]
    model = CLIPModel.from_pretrained(clip_dir).eval()
    with torch.no_grad():
        vision = model.vision_model(pixel_values=pixels).pooler_output
        embedding = (vision @ model.visual_projection.weight.T).double().numpy()
    x = embedding / np.linalg.norm(embedding, axis=1, keepdims=True)
    state = torch.load(head_file, weights_only=True)
    for k in (0, 2, 4, 6, 7):  # Linear layers; dropout is the identity at inference
        x = x @ state[f"layers.{k}.weight"].double().numpy().T + state[f"layers.{k}.bias"].double().numpy()
    ratings = predictor.ratings(images)
    np.testing.assert_allclose(ratings, x[:, 0], rtol=1e-5)
    assert len(np.unique(np.round(ratings, 6))) == len(images)
    scores = predictor.score(images)
    assert scores.dtype == np.float64
    np.testing.assert_allclose(scores, np.clip(ratings / 10, 0, 1))


def test_protocol_and_label(predictor):
    assert isinstance(predictor, AestheticScorer)
    info = predictor.describe()
    assert "not the paper's (unpublished) model" in info["note"]
    assert info["formula"].startswith("MLP(L2-normalised CLIP image embedding) / 10")
    empty = predictor.score([])
    assert empty.shape == (0,) and empty.dtype == np.float64


def test_bad_input_is_a_typed_error(tiny, predictor, tmp_path):
    with pytest.raises(InvalidImageError, match=r"images\[1\].*no image file"):
        predictor.score([_images(1)[0], tmp_path / "missing.png"])
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG broken")
    with pytest.raises(InvalidImageError, match=r"images\[0\].*not a readable image"):
        predictor.score([corrupt])
    with pytest.raises(PathNotFoundError, match="No aesthetic head file"):
        LaionAestheticPredictor.from_pretrained(tiny[0], tmp_path / "nope.pth")
    (tmp_path / "bad.pth").write_bytes(b"not a state dict")
    with pytest.raises(WeightsMismatchError, match="is not an aesthetic predictor head"):
        LaionAestheticPredictor.from_pretrained(tiny[0], tmp_path / "bad.pth")
    torch.save({"layers.0.weight": torch.zeros(1024, 768)}, tmp_path / "partial.pth")
    with pytest.raises(WeightsMismatchError, match="missing"):
        LaionAestheticPredictor.from_pretrained(tiny[0], tmp_path / "partial.pth")
