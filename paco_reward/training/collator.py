"""Turns PAIR_SCHEMA rows into model inputs, through the scorer's own rendering code.

For each row the prompt is rendered by :func:`paco_reward.local_backend.render_prompt_ids`
(the function ``LocalBackend.prompt_ids`` uses) and its image placeholders are expanded by
:func:`paco_reward.local_backend.expand_image_tokens`; the images go through
:func:`paco_reward.images.load_image` and :func:`paco_reward.images.resize_for_model`.
So the tokens before the answer are exactly the ones the scorer feeds the model.

The target is the assistant turn: ``"Yes"``/``"No"``, then the reasons, then the
end-of-turn token ``<|im_end|>``. Every prompt and padding position has label ``-100``.
In *reasoning-first* mode (the curriculum's warm-up) the target is
``"<reasons> So Yes."`` instead (see :func:`format_reasoning_first`).

    >>> collator = PacoSFTCollator(processor)                         # doctest: +SKIP
    >>> batch = collator([dataset[0], dataset[1]])                    # doctest: +SKIP
    >>> sorted(batch)                                                 # doctest: +SKIP
    ['attention_mask', 'image_grid_thw', 'input_ids', 'labels', 'mm_token_type_ids', 'pixel_values',
     'reasoning_first']
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from paco_reward.errors import InputError
from paco_reward.images import ImagePolicy, load_image, resize_for_model
from paco_reward.local_backend import expand_image_tokens, render_prompt_ids
from paco_reward.templates import format_answer, render_instruction

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


def format_reasoning_first(label: bool, reasons: str = "") -> str:
    """The warm-up target: reasons first, the decision last.

    >>> format_reasoning_first(False, "The first is red, the second is blue.")
    'The first is red, the second is blue. So No.'
    """
    word = "Yes" if label else "No"
    reasons = reasons.strip()
    return f"{reasons} So {word}." if reasons else word


def _row_image(value: Any, name: str):
    if isinstance(value, Mapping):  # datasets.Image(decode=False) / raw parquet struct
        value = value.get("bytes") or value.get("path")
    return load_image(value, name)


def pad_right(sequences: Sequence[list[int]], labels: Sequence[list[int]], pad_token_id: int):
    """Right-pad token and label lists into ``(input_ids, labels, attention_mask)`` tensors
    (labels padded with ``IGNORE_INDEX``)."""
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    label_ids = torch.full((len(sequences), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, (seq, lab) in enumerate(zip(sequences, labels)):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        label_ids[i, : len(lab)] = torch.tensor(lab)
        attention_mask[i, : len(seq)] = 1
    return input_ids, label_ids, attention_mask


class PacoSFTCollator:
    """Collates PAIR_SCHEMA rows (``image_a``, ``image_b``, ``template``, ``prompt``,
    ``label``, ``reasons``) into right-padded training inputs for a Qwen-VL-family model.

    Args:
        processor: the model's processor (tokenizer + image processor + chat template).
        min_pixels / max_pixels: the image pixel budget (default: the processor's).
        max_length: cut the reasons so a row has at most this many tokens.
        reasoning_first: render targets reasons-first (the curriculum's warm-up); the
            trainer flips this attribute when the warm-up ends.
    """

    def __init__(
        self,
        processor,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_length: int | None = None,
        reasoning_first: bool = False,
    ) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.image_policy = ImagePolicy.from_processor(processor, min_pixels, max_pixels)
        self.merge_length = processor.image_processor.merge_size**2
        self.image_token_id = processor.image_token_id
        self.end_of_turn_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.pad_token_id = self.tokenizer.pad_token_id
        self.max_length = max_length
        self.reasoning_first = reasoning_first
        self._prompt_cache: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ pieces
    def instruction(self, row: Mapping[str, Any]) -> str:
        """The rendered instruction of a row (its template filled with its prompt)."""
        return render_instruction(row["template"], row.get("prompt") or None)

    def prompt_ids(self, instruction: str) -> list[int]:
        """The scorer's prompt ids for ``instruction`` (one placeholder per image)."""
        if instruction not in self._prompt_cache:
            self._prompt_cache[instruction] = render_prompt_ids(self.processor, instruction)
        return self._prompt_cache[instruction]

    def answer_text(self, row: Mapping[str, Any], reasoning_first: bool | None = None) -> str:
        """The supervised text of a row (without the end-of-turn token)."""
        label = int(row["label"])
        if label not in (0, 1):
            raise InputError(f"row {row.get('pair_id')!r}: label must be 0 or 1; got {label!r}.")
        reasons = row.get("reasons") or ""
        first = self.reasoning_first if reasoning_first is None else reasoning_first
        return (
            format_reasoning_first(bool(label), reasons)
            if first
            else format_answer(bool(label), reasons)
        )

    def answer_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.end_of_turn_id]

    def images(self, rows: Sequence[Mapping[str, Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pixel patches and grids of every row's two images, in order (a1, b1, a2, b2, ...)."""
        pil = []
        for k, row in enumerate(rows):
            for column in ("image_a", "image_b"):
                name = f"rows[{k}].{column}"
                pil.append(resize_for_model(_row_image(row[column], name), self.image_policy, name))
        out = self.processor.image_processor(
            images=pil, size=self.image_policy.processor_size, return_tensors="pt"
        )
        return out["pixel_values"], out["image_grid_thw"]

    # ------------------------------------------------------------------ batch
    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        pixel_values, grids = self.images(rows)
        tokens_per_image = (grids.prod(-1) // self.merge_length).tolist()
        sequences: list[list[int]] = []
        labels: list[list[int]] = []
        for k, row in enumerate(rows):
            prompt = expand_image_tokens(
                self.prompt_ids(self.instruction(row)),
                self.image_token_id,
                tokens_per_image[2 * k : 2 * k + 2],
            )
            answer = self.answer_ids(self.answer_text(row))
            if self.max_length is not None and len(prompt) + len(answer) > self.max_length:
                keep = max(self.max_length - len(prompt) - 1, 1)
                answer = answer[:keep] + [self.end_of_turn_id]
            sequences.append(prompt + answer)
            labels.append([IGNORE_INDEX] * len(prompt) + answer)
        input_ids, label_ids, attention_mask = pad_right(sequences, labels, self.pad_token_id)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": label_ids,
            "mm_token_type_ids": (input_ids == self.image_token_id).int(),
            "pixel_values": pixel_values,
            "image_grid_thw": grids,
            # Which target format this batch has (the trainer drops it before the forward).
            "reasoning_first": torch.full((len(rows),), self.reasoning_first, dtype=torch.bool),
        }
