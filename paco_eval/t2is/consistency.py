"""T2IS-Bench's visual-consistency judge, through the library's one scoring path.

As the released ``T2IS_Eval/test_prompt_consistency.py`` (chengyou-jia/T2IS@a40b858): for
each dimension of a case, each criterion, each pair ``i < j`` of its images, one user message
``[image_i, image_j, text]`` with

    text = "Do images meet the following criteria? {criterion} Please answer Yes or No."

both images resized as ``qwen_vl_utils`` does for ``resized_height = resized_width = 512``
(``smart_resize`` to 504 x 504), and the score softmax([logit No, logit Yes])[1] of the first
generated step, which is :class:`~paco_reward.PacoReward`'s P(Yes) / (P(Yes) + P(No)) with
the exact Yes/No tokens (``canonical_yes_no=False``; the ids come from the judge's
tokenizer, the released code hard-codes Qwen2.5's 9454 / 2753). Criterion = mean over pairs,
dimension = mean over criteria.

The released code calls ``generate`` once per pair per criterion and decodes every image
again each time; here each image of a case is loaded and resized once, and all of the case's
(pair, criterion) requests go to the judge in one call, which encodes each distinct image once
and batches the pairs.

    >>> CONSISTENCY_TEMPLATE.format(prompt="The dog is the same.")
    'Do images meet the following criteria? The dog is the same. Please answer Yes or No.'
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from PIL import Image

from paco_eval.t2is.data import CONSISTENCY_DIMENSIONS, CaseImages, T2ISCase
from paco_reward.errors import InputError
from paco_reward.images import load_image, resize_as_requested
from paco_reward.templates import TEMPLATES

__all__ = ["CONSISTENCY_TEMPLATE", "RELEASED_RESIZE", "judge_case", "prepare_image", "prompt_sha256"]

CONSISTENCY_TEMPLATE = TEMPLATES["t2is"].text
RELEASED_RESIZE = 512  # the size the released script asks qwen_vl_utils for (it gives 504)


def released_size(size: int = RELEASED_RESIZE, factor: int = 28) -> tuple[int, int]:
    """(height, width) ``qwen_vl_utils.fetch_image`` resizes to for ``resized_height =
    resized_width = size``."""
    from qwen_vl_utils.vision_process import smart_resize

    return smart_resize(size, size, factor=factor)


def prepare_image(path: str | Path, size: int | None = RELEASED_RESIZE) -> Image.Image:
    """An image as the released script hands it to the model: RGB (transparency on white),
    resized to :func:`released_size` with PIL's default filter, as ``fetch_image`` does."""
    image = load_image(str(path), name=str(path))
    return image if size is None else resize_as_requested(image, size, size)


def prompt_sha256() -> str:
    """The hash of the prompt template, for the report's protocol."""
    return hashlib.sha256(CONSISTENCY_TEMPLATE.encode("utf-8")).hexdigest()


def judge_case(
    judge: Any,
    case: T2ISCase,
    images: CaseImages,
    *,
    resize: int | None = RELEASED_RESIZE,
    dimensions: Sequence[str] = CONSISTENCY_DIMENSIONS,
) -> dict[str, Any]:
    """Score one case's criteria over all pairs of its images with ``judge`` (a
    :class:`~paco_reward.PacoReward`); a results row.

    The row: ``key`` (case id), ``images`` (the indices used), ``pairs``, and per dimension
    present ``{"criteria": [texts], "scores": [per-criterion mean], "pair_scores": [[...]]}``
    (a criterion with no pair, i.e. fewer than two images, has no score).
    """
    pil = [prepare_image(p, resize) for p in images.paths]
    pairs = list(combinations(range(len(pil)), 2))
    requests, slots = [], []
    for dim in dimensions:
        for c, text in enumerate(case.criteria.get(dim, [])):
            if not text.strip():
                raise InputError(f"case {case.case_id} {dim} criterion {c} is empty.")
            for i, j in pairs:
                requests.append((pil[i], pil[j], text))
                slots.append((dim, c))
    scores = judge.score_pairs(requests, template=TEMPLATES["t2is"]) if requests else []
    per: dict[tuple[str, int], list[float]] = {}
    for slot, score in zip(slots, scores):
        per.setdefault(slot, []).append(float(score))
    dims = {}
    for dim in dimensions:
        if dim not in case.criteria:
            continue
        texts = case.criteria[dim]
        pair_scores = [per.get((dim, c), []) for c in range(len(texts))]
        dims[dim] = {
            "criteria": texts,
            "pair_scores": pair_scores,
            "scores": [sum(s) / len(s) for s in pair_scores if s],
        }
    return {"key": case.case_id, "images": images.indices, "missing": images.missing,
            "pairs": [list(p) for p in pairs], "dimensions": dims}  # fmt: skip
