"""Bad input raises a typed error that names the input; nothing is silently scored."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from paco_reward import InvalidImageError, LayoutError, PromptError, YesNoTokenError
from paco_reward.errors import InputTypeError


def test_corrupt_image_file_is_named(tiny_reward, random_images, tmp_path):
    bad = tmp_path / "panel.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (good,) = random_images(1)
    with pytest.raises(InvalidImageError, match=r"pairs\[1\]\[1\].*panel\.png.*not a readable image"):
        tiny_reward.score_pairs([(good, good, "fox"), (good, str(bad), "fox")])


def test_missing_file(tiny_reward, random_images, tmp_path):
    (good,) = random_images(1)
    with pytest.raises(
        InvalidImageError, match=r"image_b.*no image file.*nope\.png|pairs\[0\]\[1\].*no image file"
    ):
        tiny_reward.score(good, tmp_path / "nope.png", "fox")


def test_zero_size_image(tiny_reward, random_images):
    (good,) = random_images(1)
    with pytest.raises(InvalidImageError, match=r"pairs\[0\]\[0\]: zero-size"):
        tiny_reward.score(Image.new("RGB", (0, 5)), good, "fox")
    with pytest.raises(InvalidImageError, match="zero-size"):
        tiny_reward.score(np.zeros((0, 4, 3), np.uint8), good, "fox")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.zeros(7, dtype=np.uint8), "not an image"),
        (np.zeros((8, 8, 5), dtype=np.uint8), "not an image"),
        (np.full((8, 8, 3), 2.0, dtype=np.float32), r"in \[0, 1\]"),
        (np.zeros((8, 8, 3), dtype=np.int64), "unsupported array dtype"),
        (torch.zeros(2, 3, 8, 8), "not an image"),
        ({"not": "an image"}, "expected a PIL image"),
    ],
)
def test_non_image_inputs(tiny_reward, random_images, value, message):
    (good,) = random_images(1)
    with pytest.raises(InvalidImageError, match=message):
        tiny_reward.score(good, value, "fox")


def test_layout_that_does_not_divide_the_grid(tiny_reward):
    grid = Image.new("RGB", (100, 100))
    with pytest.raises(LayoutError, match=r"100x100 image cannot be cut into a 7x7 grid"):
        tiny_reward.score_grid(grid, "a 7x7 grid of foxes")


def test_grid_without_layout(tiny_reward):
    with pytest.raises(LayoutError, match="No grid layout"):
        tiny_reward.score_grid(Image.new("RGB", (64, 64)), "a fox without a layout")
    with pytest.raises(LayoutError, match="needs layout"):
        tiny_reward.score_grid(Image.new("RGB", (64, 64)))


@pytest.mark.parametrize("theme", ["", "   ", None])
def test_empty_theme_where_the_template_needs_one(tiny_reward, random_images, theme):
    a, b = random_images(2)
    with pytest.raises(PromptError, match="'consistency' needs a non-empty prompt"):
        tiny_reward.score(a, b, theme)


def test_rank_template_needs_no_theme(tiny_reward, random_images):
    a, b = random_images(2)
    assert 0.0 < tiny_reward.score(a, b, template="rank") < 1.0


def test_unknown_template(tiny_reward, random_images):
    a, b = random_images(2)
    with pytest.raises(PromptError, match="Unknown template 'consistensy'"):
        tiny_reward.score(a, b, "fox", template="consistensy")


def test_malformed_pairs(tiny_reward, random_images):
    (a,) = random_images(1)
    with pytest.raises(InputTypeError, match=r"pairs\[0\] must be"):
        tiny_reward.score_pairs([a])


def test_tokenizer_without_single_token_yes_no():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate("YNeosabc")}
    raw = Tokenizer(models.WordPiece(vocab, unk_token="a", max_input_chars_per_word=100))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw)
    from paco_reward import YesNoTokens

    with pytest.raises(YesNoTokenError, match="does not encode 'Yes' and 'No' as single tokens"):
        YesNoTokens.from_tokenizer(tokenizer)


@pytest.mark.parametrize(
    ("size", "budget"),
    [((3000, 20), (784, 4 * 784)), ((20, 3000), (784, 4 * 784)), ((4000, 21), (784, 64 * 784)),
     ((2000, 11), (3136, 3136)), ((600, 5), (784, 2 * 784)), ((900, 30), (784, 16384 * 784))],
)  # fmt: skip
def test_extreme_aspect_ratios_resize_to_what_the_processor_keeps(size, budget):
    """Checked against transformers' own Qwen2-VL ``smart_resize``: the processor must leave
    our resize as it is (else the model would see another size than we hash and cache)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    from paco_reward.images import ImagePolicy, resize_for_model

    policy = ImagePolicy(*budget)
    width, height = resize_for_model(Image.new("RGB", size), policy).size
    assert min(width, height) >= policy.factor and width * height <= policy.max_pixels
    assert width % policy.factor == 0 and height % policy.factor == 0
    assert smart_resize(height, width, policy.factor, *budget) == (height, width)
    assert (width > height) == (size[0] > size[1])


def test_extreme_aspect_ratio_scores_under_a_small_budget(tiny_model_dir, random_images):
    from paco_reward import PacoReward

    rm = PacoReward.from_pretrained(tiny_model_dir, min_pixels=784, max_pixels=4 * 784)
    (good,) = random_images(1)
    strip = np.random.default_rng(0).integers(0, 256, (20, 3000, 3), dtype=np.uint8)
    assert 0.0 < rm.score(strip, good, "fox") < 1.0
    with pytest.raises(
        InvalidImageError, match=r"pairs\[0\]\[0\].*aspect ratio 300:1.*at most 200:1"
    ):
        rm.score(np.zeros((10, 3000, 3), np.uint8), good, "fox")


def test_a_prompt_the_template_would_ignore_is_an_error(tiny_reward, random_images):
    ref, a, b = random_images(3)
    with pytest.raises(PromptError, match=r"Template 'rank' takes no prompt.*'a red fox'.*ignored"):
        tiny_reward.rank(ref, [a, b], "a red fox")
    with pytest.raises(PromptError, match="takes no prompt"):
        tiny_reward.score_pairs([(a, b, "a red fox")], template="rank")
    themed = tiny_reward.rank(ref, [a, b], "a red fox", template="consistency")
    expected = tiny_reward.score_pairs([(ref, a, "a red fox"), (ref, b, "a red fox")])
    np.testing.assert_allclose(themed.scores, expected, atol=1e-6)
    assert tiny_reward.rank(ref, [a, b]).scores.shape == (2,)
