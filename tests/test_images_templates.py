"""Image normalisation and instruction templates."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from paco_reward.errors import ConfigError, InvalidImageError, PromptError
from paco_reward.images import ImagePolicy, image_hash, load_image, resize_for_model
from paco_reward.templates import (
    TEMPLATES,
    build_messages,
    format_answer,
    get_template,
    render_instruction,
)


def test_every_input_kind_gives_the_same_rgb_image(tmp_path):
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
    pil = Image.fromarray(array)
    pil.save(tmp_path / "x.png")
    candidates = [
        pil,
        tmp_path / "x.png",
        str(tmp_path / "x.png"),
        array,
        array.astype(np.float32) / 255.0,
        torch.from_numpy(array).permute(2, 0, 1).float() / 255.0,
        torch.from_numpy(array).permute(2, 0, 1).contiguous(),
        (tmp_path / "x.png").read_bytes(),
    ]
    for value in candidates:
        out = load_image(value)
        assert out.mode == "RGB" and out.size == (10, 12)
        np.testing.assert_array_equal(np.asarray(out), array)


def test_transparency_is_composited_on_white_and_grayscale_expanded():
    rgba = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    assert load_image(rgba).getpixel((0, 0)) == (255, 255, 255)
    gray = np.full((5, 5), 7, dtype=np.uint8)
    assert load_image(gray).getpixel((1, 1)) == (7, 7, 7)


def test_resize_policy_matches_qwen_smart_resize():
    image = Image.new("RGB", (1000, 500))
    out = resize_for_model(image, ImagePolicy(min_pixels=4 * 784, max_pixels=64 * 784, factor=28))
    assert out.width % 28 == 0 and out.height % 28 == 0
    assert out.width * out.height <= 64 * 784
    assert abs(out.width / out.height - 2.0) < 0.3
    small = resize_for_model(
        Image.new("RGB", (10, 10)), ImagePolicy(min_pixels=3136, max_pixels=10**6)
    )
    assert small.size == (56, 56)


def test_extreme_aspect_ratio_and_bad_policy():
    with pytest.raises(InvalidImageError, match=r"thin: a 5000x10 image has aspect ratio 500:1"):
        resize_for_model(Image.new("RGB", (5000, 10)), ImagePolicy(), name="thin")
    with pytest.raises(ConfigError, match="min_pixels"):
        ImagePolicy(min_pixels=10, max_pixels=5)


def test_a_file_or_bytes_that_are_not_an_image_name_the_input_not_a_buffer(tmp_path):
    """PIL's message named the BytesIO it read ("cannot identify image file <_io.BytesIO
    object at 0x...>"); the error names the input, the file and what to give instead."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    with pytest.raises(InvalidImageError) as info:
        load_image(notes, "pairs[0][1]")
    message = str(info.value)
    assert message.startswith(f"pairs[0][1]: {str(notes)!r} is not a readable image")
    assert "PNG, JPEG or WebP" in message and "_io." not in message
    with pytest.raises(InvalidImageError) as info:
        load_image(b"not an image", "images[2]")
    assert str(info.value) == (
        "images[2]: its bytes are not a decodable image (not an image format PIL can read "
        "(PNG, JPEG, WebP, ...))."
    )


def test_image_hash_is_content_based():
    a = Image.new("RGB", (4, 4), (1, 2, 3))
    assert image_hash(a) == image_hash(a.copy())
    assert image_hash(a) != image_hash(Image.new("RGB", (4, 4), (1, 2, 4)))


def test_paper_templates_verbatim():
    assert render_instruction("consistency", "a fox") == (
        'Given two subfigures generated based on the theme: "a fox", do the two images maintain '
        'consistency in terms of style, logic and identity? Answer "Yes" and "No" first, and then '
        "provide detailed reasons."
    )
    assert render_instruction("criteria", "Same fur.") == (
        "Do images meet the following criteria? Same fur. Please answer Yes or No first, then "
        "provide detailed reasons."
    )
    assert "{prompt}" not in TEMPLATES["rank"].text
    for name in ("edit_consistency", "edit_following"):
        text = render_instruction(name, "add a hat")
        assert (
            "edited image (second)" in text
            and "original image (first)" in text
            and "add a hat" in text
        )


def test_custom_template_validation():
    assert get_template("Is it {prompt}?").needs_prompt
    with pytest.raises(PromptError, match="only field allowed"):
        get_template("Is it {theme}?")
    with pytest.raises(PromptError, match="Unknown template"):
        get_template("nonsense")


def test_messages_and_answers():
    assert format_answer(True, " The same fox. ") == "Yes. The same fox."
    assert format_answer(False) == "No"
    messages = build_messages("Q?", answer="No. Different.")
    assert [p["type"] for p in messages[0]["content"]] == ["image", "image", "text"]
    assert messages[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "No. Different."}],
    }
