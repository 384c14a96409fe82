"""PacoSFTCollator renders exactly the scorer's prompt, masks it, supervises the answer."""

from __future__ import annotations

import io

import pytest
import torch

from paco_reward.errors import InputError, PromptError
from paco_reward.images import resize_for_model
from paco_reward.local_backend import expand_image_tokens
from paco_reward.training.collator import IGNORE_INDEX, PacoSFTCollator, format_reasoning_first
from paco_reward.training.toy import colour_pairs


@pytest.fixture(scope="module")
def rows():
    ds = colour_pairs(4, seed=3, size=40, template="consistency", prompt="a red square")
    return [ds[i] for i in range(len(ds))]


@pytest.fixture(scope="module")
def backend(tiny_reward):
    return tiny_reward.backend


def _supervised_text(collator, batch, i):
    ids = batch["labels"][i][batch["labels"][i] != IGNORE_INDEX].tolist()
    return collator.tokenizer.decode(ids)


def test_prompt_tokens_are_the_scorers_and_are_masked(rows, backend):
    collator = PacoSFTCollator(backend.processor)
    batch = collator(rows)
    for i, row in enumerate(rows):
        images = [resize_for_model(row[c], backend.image_policy) for c in ("image_a", "image_b")]
        _, grids = backend.preprocess_images(images)
        instruction = collator.instruction(row)
        scorer = backend.build_inputs([(0, 1, instruction)], grids)["input_ids"][0].tolist()
        n = len(scorer)
        assert batch["input_ids"][i, :n].tolist() == scorer
        assert (batch["labels"][i, :n] == IGNORE_INDEX).all()
        assert batch["labels"][i, n] != IGNORE_INDEX  # the decision token is supervised


def test_answer_is_decision_reasons_end_of_turn(rows, backend):
    collator = PacoSFTCollator(backend.processor)
    batch = collator(rows)
    for i, row in enumerate(rows):
        word = "Yes" if row["label"] else "No"
        assert _supervised_text(collator, batch, i) == f"{word}. {row['reasons']}<|im_end|>"
        first = batch["labels"][i][batch["labels"][i] != IGNORE_INDEX][0].item()
        assert collator.tokenizer.decode([first]) == word
    # padding is masked and not attended
    pad = batch["attention_mask"] == 0
    assert (batch["labels"][pad] == IGNORE_INDEX).all()


def test_rendering_equals_the_chat_template_of_the_messages_column(rows, backend):
    """The schema's `messages` rendered with the chat template give the same tokens (plus the
    template's trailing newline after <|im_end|>, which is not supervised)."""
    processor = backend.processor
    collator = PacoSFTCollator(processor)
    batch = collator(rows)
    for i, row in enumerate(rows):
        text = processor.apply_chat_template(row["messages"], tokenize=False)
        ids = processor.tokenizer.encode(text, add_special_tokens=False)
        counts = (batch["image_grid_thw"][2 * i : 2 * i + 2].prod(-1) // 4).tolist()
        expected = expand_image_tokens(ids, processor.image_token_id, counts)
        length = int(batch["attention_mask"][i].sum())
        assert (
            batch["input_ids"][i, :length].tolist() + processor.tokenizer.encode("\n") == expected
        )


def test_pixel_values_are_the_scorers(rows, backend):
    collator = PacoSFTCollator(backend.processor)
    batch = collator(rows[:1])
    images = [resize_for_model(rows[0][c], backend.image_policy) for c in ("image_a", "image_b")]
    pixels, grids = backend.preprocess_images(images)
    torch.testing.assert_close(batch["pixel_values"], pixels)
    assert batch["image_grid_thw"].tolist() == grids.tolist()


def test_reasoning_first_target(rows, backend):
    collator = PacoSFTCollator(backend.processor, reasoning_first=True)
    batch = collator(rows)
    for i, row in enumerate(rows):
        word = "Yes" if row["label"] else "No"
        assert _supervised_text(collator, batch, i) == f"{row['reasons']} So {word}.<|im_end|>"
    assert format_reasoning_first(True, "") == "Yes"


def test_pixel_caps_change_the_number_of_image_tokens(rows, backend):
    small = PacoSFTCollator(backend.processor, min_pixels=784, max_pixels=784)(rows[:1])
    large = PacoSFTCollator(backend.processor, min_pixels=56 * 56, max_pixels=56 * 56)(rows[:1])
    image_token = backend.processor.image_token_id
    assert int((small["input_ids"] == image_token).sum()) == 2
    assert int((large["input_ids"] == image_token).sum()) == 8


def test_encoded_image_dicts_and_max_length(rows, backend):
    row = dict(rows[0])
    for column in ("image_a", "image_b"):
        buffer = io.BytesIO()
        row[column].save(buffer, format="PNG")
        row[column] = {"bytes": buffer.getvalue(), "path": None}
    collator = PacoSFTCollator(backend.processor, max_length=None)
    full = collator([row])
    prompt_len = int((full["labels"][0] == IGNORE_INDEX).sum())
    cut = PacoSFTCollator(backend.processor, max_length=prompt_len + 3)([row])
    kept = cut["labels"][0][cut["labels"][0] != IGNORE_INDEX].tolist()
    assert len(kept) == 3 and kept[-1] == collator.end_of_turn_id
    assert kept[0] == full["labels"][0][prompt_len].item()


def test_bad_label_raises(rows, backend):
    row = dict(rows[0], label=2)
    with pytest.raises(InputError, match="label must be 0 or 1; got 2"):
        PacoSFTCollator(backend.processor)([row])


def test_placeholder_count_mismatch_raises():
    with pytest.raises(PromptError, match="2 image placeholders but 1 images"):
        expand_image_tokens([5, 1, 5], image_token_id=5, tokens_per_image=[3])


def test_scorer_inputs_match_the_processor(rows, backend):
    """The refactored LocalBackend still builds exactly what processor(text, images) builds."""
    processor = backend.processor
    images = [resize_for_model(rows[0][c], backend.image_policy) for c in ("image_a", "image_b")]
    _, grids = backend.preprocess_images(images)
    instruction = PacoSFTCollator(processor).instruction(rows[0])
    ours = backend.build_inputs([(0, 1, instruction)], grids)["input_ids"][0].tolist()
    text = processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "image"},
                    {"type": "text", "text": instruction},
                ],
            }
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    reference = processor(
        text=[text], images=images, images_kwargs={"size": backend.image_policy.processor_size}
    )
    assert ours == list(reference["input_ids"][0])
