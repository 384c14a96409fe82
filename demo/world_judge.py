"""The oracle as the judge of generated grids: consistency and prompt alignment.

The generator's grids have no ground truth, so they are judged against their prompt: the
oracle (:func:`data_pipeline.world_oracle.read_panel`) reads every panel, and a grid scores

- ``consistency``: the mean :func:`~data_pipeline.synthetic.panel_similarity` over its panel
  pairs (1.0 = one character in one style throughout), and
- ``alignment``: the fraction of (panel, attribute) places showing the prompt's value, pips
  included (:func:`~data_pipeline.world_oracle.prompt_alignment`), and
- ``diversity``: the fraction of its panel pairs whose pip counts differ. A story's panels
  show one character at different steps; the consistency hack draws one picture in every
  panel, which consistency rewards and this reads as 0.

A panel the oracle cannot read (no character of a world colour) counts as sharing nothing
with any panel, differing from none and showing nothing of the prompt: an unreadable grid is
a bad grid, never left out of a mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
from PIL import Image

from paco_reward.errors import InputError

# What the oracle reads of a grid, in the order tables give them.
SCORES = ("consistency", "alignment", "diversity")


def judge_grid(image: Image.Image, record: dict) -> dict:
    """``{"consistency", "alignment", "diversity", "unreadable", "panels"}`` of one grid of
    ``record``."""
    from data_pipeline.synthetic import ATTRIBUTES, panel_similarity
    from data_pipeline.world_oracle import read_panel
    from paco_reward.grids import parse_layout, split_grid

    rows, cols = parse_layout(record["layout"])
    panels = []
    for panel in split_grid(image, rows, cols):
        try:
            panels.append(read_panel(panel))
        except ValueError:
            panels.append(None)
    pairs = list(combinations(panels, 2))
    consistency = np.mean([0.0 if None in (a, b) else panel_similarity(a, b) for a, b in pairs])
    diversity = np.mean([None not in (a, b) and a.step != b.step for a, b in pairs])
    wanted = record["synthetic"]["attributes"]
    hits = [
        [p is not None and getattr(p, key) == wanted[key] for key in ATTRIBUTES]
        + [p is not None and p.step == k]
        for k, p in enumerate(panels)
    ]
    return {
        "consistency": float(consistency),
        "alignment": float(np.mean(hits)),
        "diversity": float(diversity),
        "unreadable": sum(p is None for p in panels),
        "panels": panels,
    }


def judge_grids(images: Sequence[Image.Image], records: Sequence[dict]) -> dict:
    """Judge grids (``images[i]`` drawn for ``records[i]``).

    Returns:
        ``{"grids", "consistency", "alignment", "diversity"}`` (means), their standard
        errors (``"consistency_se"``, ...), ``"unreadable_panels"``, ``"per_item"`` (the
        three scores of every grid, in order) and ``"shows_prompt"``
        (per attribute, the fraction of panels showing the prompt's value).
    """
    from data_pipeline.synthetic import ATTRIBUTES

    if len(images) != len(records) or not records:
        raise InputError(
            f"judge_grids needs one image per record; got {len(images)} images, "
            f"{len(records)} records."
        )
    judged = [judge_grid(im, r) for im, r in zip(images, records)]
    result: dict = {"grids": len(judged)}
    for key in SCORES:
        values = np.array([j[key] for j in judged])
        result[key] = float(values.mean())
        result[f"{key}_se"] = (
            float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0
        )
    result["unreadable_panels"] = sum(j["unreadable"] for j in judged)
    shows = {}
    for key in (*ATTRIBUTES, "step"):
        hits = [
            p is not None
            and (
                p.step == k
                if key == "step"
                else getattr(p, key) == r["synthetic"]["attributes"][key]
            )
            for j, r in zip(judged, records)
            for k, p in enumerate(j["panels"])
        ]
        shows[key] = float(np.mean(hits))
    result["shows_prompt"] = shows
    result["per_item"] = [{key: j[key] for key in SCORES} for j in judged]
    return result
