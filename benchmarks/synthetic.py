"""Small synthetic benchmark sets in the official layouts, with known answers.

Used by the tests and the demo (no download): coloured-shape panels whose pixel
distances are ordered by construction, so a pixel-space scorer's ranking is known
before anything runs.

    >>> info = make_consistency_rank_set("/tmp/cr", [[0, 1, 2, 3], [3, 2, 1, 0]])  # doctest: +SKIP
    >>> info["items"][0]["pixel_order"]                                           # doctest: +SKIP
    [2, 0, 3, 1]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from paco_reward.errors import InputError

BACKGROUND = (245, 245, 240)
BASE_COLOURS = [(40, 90, 150), (150, 60, 40), (60, 130, 60), (110, 70, 140), (130, 120, 40)]
SHAPES = ["circle", "square", "triangle"]


def shape_panel(
    colour: Sequence[int], shape: str = "circle", size: int = 64, margin: int = 12
) -> Image.Image:
    """A flat-colour shape on a light background.

    Example:
        >>> shape_panel((200, 30, 30), "square").size
        (64, 64)
    """
    image = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    box = (margin, margin, size - margin, size - margin)
    fill = tuple(int(c) for c in colour)
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon(
            [(size // 2, margin), (margin, size - margin), (size - margin, size - margin)],
            fill=fill,
        )
    else:
        raise InputError(f"shape={shape!r} is not one of {SHAPES}.")
    return image


def shifted(colour: Sequence[int], delta: int) -> tuple[int, int, int]:
    """``colour`` with every channel raised by ``delta`` (clipped to 255)."""
    return tuple(int(min(255, c + delta)) for c in colour)


def make_consistency_rank_set(
    output_dir: str | Path,
    human_orders: Sequence[Sequence[int]],
    deltas: Sequence[int] = (0, 30, 70, 100),
    categories: Sequence[str] | None = None,
    seed: int = 0,
    size: int = 64,
) -> dict:
    """Write a ConsistencyRank-format set: per item a reference shape and candidates whose
    colour is shifted by ``deltas`` (so pixel distance to the reference grows with the
    delta index), in a seeded shuffled candidate order.

    Args:
        output_dir: folder to create (``images/``, ``prompt_data.jsonl``,
            ``consistency_full_rank.jsonl``).
        human_orders: per item, the human order as *delta indices*, best first
            (``[0, 1, 2, 3]`` = people agree with pixel distance).
        deltas: colour shift of each candidate; must be increasing.
        categories: optional category per item (written to ``prompt_data.jsonl``).
        seed: seeds the candidate shuffling.
        size: panel side in pixels.

    Returns:
        ``{"data_dir": Path, "items": [...]}``; each item has ``folder``,
        ``comp_images``, ``rank_images``, ``human_order`` (candidate indices, best
        first) and ``pixel_order`` (candidate indices by increasing delta: what a pixel
        scorer must predict).
    """
    if list(deltas) != sorted(set(deltas)):
        raise InputError(f"deltas={list(deltas)} must be strictly increasing.")
    if categories is not None and len(categories) != len(human_orders):
        raise InputError(
            f"categories has {len(categories)} entries for {len(human_orders)} items; pass one per item."
        )
    root = Path(output_dir)
    rng = np.random.default_rng(seed)
    items, rank_lines, prompt_lines = [], [], []
    for i, human in enumerate(human_orders):
        if sorted(human) != list(range(len(deltas))):
            raise InputError(f"human_orders[{i}]={list(human)} must order 0..{len(deltas) - 1}.")
        folder = f"{i:04d}"
        colour = BASE_COLOURS[i % len(BASE_COLOURS)]
        shape = SHAPES[i % len(SHAPES)]
        (root / "images" / folder).mkdir(parents=True, exist_ok=True)
        shape_panel(colour, shape, size).save(root / "images" / folder / "0_0.png")
        slots = [int(s) for s in rng.permutation(len(deltas))]  # candidate index of each delta
        comp = [""] * len(deltas)
        for d, slot in enumerate(slots):
            name = f"{slot + 1}_{d % 4}.png"
            shape_panel(shifted(colour, deltas[d]), shape, size).save(
                root / "images" / folder / name
            )
            comp[slot] = name
        rank_images = [comp[slots[d]] for d in human]
        category = categories[i] if categories is not None else None
        items.append(
            {
                "folder": folder,
                "comp_images": comp,
                "rank_images": rank_images,
                "human_order": [slots[d] for d in human],
                "pixel_order": list(slots),
                "category": category,
            }
        )
        rank_lines.append(
            {
                "folder": folder,
                "ref_image": "0_0.png",
                "comp_images": comp,
                "rank_images": rank_images,
            }
        )
        prompt = {"idx": folder, "prompt": f"a {shape} in flat colour"}
        if category is not None:
            prompt["category"] = category
        prompt_lines.append(prompt)
    root.mkdir(parents=True, exist_ok=True)
    (root / "consistency_full_rank.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rank_lines), encoding="utf-8"
    )
    (root / "prompt_data.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in prompt_lines), encoding="utf-8"
    )
    return {"data_dir": root, "items": items}


def make_edit_reward_set(
    output_dir: str | Path,
    rows: Sequence[dict],
    fmt: str = "disk",
    size: int = 48,
) -> Path:
    """Write an EditReward-Bench-format set.

    Each entry of ``rows`` gives ``task_type``, ``dimension``, ``deltas`` (colour shift of
    each output relative to the input, preferred first) and optionally ``keys`` (output
    ids), ``image`` (which base colour/shape; rows that share output keys must share
    ``image`` and ``deltas``) and ``instruction``. A pixel scorer's
    score of an output decreases with its delta.

    Args:
        output_dir: target folder (``fmt="disk"``: ``save_to_disk``; ``"parquet"``:
            ``data/train-00000-of-00001.parquet`` inside it).
        rows: the row specs.
        fmt: ``"disk"`` or ``"parquet"``.
        size: image side in pixels.

    Returns:
        The folder to pass as ``--data``.
    """
    import datasets

    if fmt not in ("disk", "parquet"):
        raise InputError(f"fmt={fmt!r} must be 'disk' or 'parquet'.")
    columns: dict[str, list] = {
        k: []
        for k in ("key", "instruction", "input_image", "output_images", "task_type", "dimension")
    }
    for i, spec in enumerate(rows):
        base = int(spec.get("image", i))
        colour = BASE_COLOURS[base % len(BASE_COLOURS)]
        shape = SHAPES[base % len(SHAPES)]
        keys = spec.get("keys") or [f"row{i}_out{j}" for j in range(len(spec["deltas"]))]
        columns["key"].append(list(keys))
        columns["instruction"].append(spec.get("instruction", f"make the {shape} a little lighter"))
        columns["input_image"].append(shape_panel(colour, shape, size))
        columns["output_images"].append(
            [shape_panel(shifted(colour, d), shape, size) for d in spec["deltas"]]
        )
        columns["task_type"].append(spec["task_type"])
        columns["dimension"].append(spec["dimension"])
    features = datasets.Features(
        {
            "key": datasets.Sequence(datasets.Value("string")),
            "instruction": datasets.Value("string"),
            "input_image": datasets.Image(),
            "output_images": datasets.Sequence(datasets.Image()),
            "task_type": datasets.Value("string"),
            "dimension": datasets.Value("string"),
        }
    )
    ds = datasets.Dataset.from_dict(columns, features=features)
    root = Path(output_dir)
    if fmt == "disk":
        ds.save_to_disk(str(root))
    else:
        (root / "data").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(root / "data" / "train-00000-of-00001.parquet"))
    return root
