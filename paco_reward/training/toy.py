"""Relational toy pairs: "are the two squares the same colour?".

A small generator of pair-schema rows (:mod:`paco_reward.schema`) whose label can
only be read by *comparing* the two images: each image alone is a uniformly random colour,
so neither image carries any information about the label. Used by tests, the demo and
``dataset_path: toy-colour-pairs`` recipes when no exported dataset is at hand.

    >>> ds = colour_pairs(8, seed=0)
    >>> sorted(ds.column_names)[:4]
    ['category', 'image_a', 'image_b', 'label']
    >>> ds[0]["reasons"].startswith("The first is ")
    True
"""

from __future__ import annotations

import hashlib

import numpy as np
from PIL import Image, ImageDraw

from paco_reward.schema import PAIR_COLUMNS, pair_features
from paco_reward.templates import build_messages, format_answer, render_instruction

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (210, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 210),
    "yellow": (230, 210, 40),
    "purple": (140, 50, 170),
    "orange": (240, 130, 30),
}
TOY_THEME = "a square"


def _square(rgb: tuple[int, int, int], size: int, rng: np.random.Generator) -> Image.Image:
    background = tuple(int(v) for v in rng.integers(225, 256, 3))
    image = Image.new("RGB", (size, size), background)
    side = int(rng.integers(size // 2, size - 3))
    x0, y0 = (int(v) for v in rng.integers(0, size - side + 1, 2))
    jitter = rng.integers(-20, 21, 3)
    colour = tuple(int(np.clip(c + j, 0, 255)) for c, j in zip(rgb, jitter))
    ImageDraw.Draw(image).rectangle((x0, y0, x0 + side - 1, y0 + side - 1), fill=colour)
    return image


def colour_pairs(
    n: int,
    seed: int = 0,
    size: int = 28,
    template: str = "rank",
    prompt: str = "",
    colours: dict[str, tuple[int, int, int]] | None = None,
):
    """``n`` pair rows (``datasets.Dataset`` with the pair-schema columns); half of them
    show the same colour (label 1, "Yes"), half different colours (label 0, "No").

    Args:
        n: number of rows.
        seed: the same seed gives the same rows.
        size: image side in pixels (28 = one Qwen2.5-VL vision token).
        template / prompt: the instruction (a template name and its prompt).
        colours: name → RGB palette (default: six well-separated colours).
    """
    import datasets

    palette = colours or COLOURS
    names = list(palette)
    rng = np.random.default_rng(seed)
    instruction = render_instruction(template, prompt or None)
    rows: dict[str, list] = {k: [] for k in PAIR_COLUMNS}
    for i in range(n):
        first = names[int(rng.integers(len(names)))]
        same = bool(i % 2 == 0)
        if same:
            second = first
        else:
            second = names[int(rng.choice([k for k in range(len(names)) if names[k] != first]))]
        reasons = f"The first is {first}, the second is {second}."
        prompt_id = f"toy-{seed}-{i}"
        rows["pair_id"].append(hashlib.sha1(f"{prompt_id}|{template}".encode()).hexdigest())
        rows["prompt_id"].append(prompt_id)
        rows["image_a"].append(_square(palette[first], size, rng))
        rows["image_b"].append(_square(palette[second], size, rng))
        rows["template"].append(template)
        rows["prompt"].append(prompt)
        rows["label"].append(int(same))
        rows["reasons"].append(reasons)
        rows["messages"].append(build_messages(instruction, answer=format_answer(same, reasons)))
        rows["category"].append("colour")
        rows["source"].append("toy")
    order = rng.permutation(n)
    rows = {k: [v[j] for j in order] for k, v in rows.items()}
    return datasets.Dataset.from_dict(rows, features=pair_features())


def colour_pair_splits(train_size: int, test_size: int, seed: int = 0, **kwargs):
    """A ``DatasetDict`` with ``train`` and ``test`` splits drawn with different seeds."""
    import datasets

    return datasets.DatasetDict(
        {
            "train": colour_pairs(train_size, seed=seed, **kwargs),
            "test": colour_pairs(test_size, seed=seed + 1_000_003, **kwargs),
        }
    )
