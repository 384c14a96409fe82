"""T2IS-Bench's prompt alignment (VQAScore per sub-image) and aesthetics, per image.

As the released ``T2IS_Eval/vqa_alignment.py`` (chengyou-jia/T2IS@a40b858, run as its shell
script does, ``--start_idx 0``): the k-th entry of a case's ``prompt_alignment.json`` (in
the file's order, whatever its key) is the image ``<case_id>_<k:04d>``; it is scored against
its Entity, Attribute and Relation texts in one call, and each dimension's value is the mean
of its texts' scores. The table pools every scored image (not per case).

An alignment scorer is anything with ``score(images, texts) -> [array per image]``:
:class:`paco_reward.vqascore.VQAScore` (CLIP-FlanT5, the paper's), or
:class:`paco_reward.vqascore.JudgeVQAScore` (the same formula over a judge the library
scores; not the paper's). An aesthetic scorer has ``score(images) -> array``
(:class:`paco_reward.aesthetics.LaionAestheticPredictor`).

    >>> class Half:
    ...     def score(self, images, texts): return [[0.5] * len(t) for t in texts]
    >>> score_alignment(Half(), "x.png", {"Entity": ["a cat"], "Relation": []}, mode="default")
    {'Entity': 0.5, 'Attribute': None, 'Relation': None}
"""

from __future__ import annotations

from typing import Any

from paco_eval.t2is.data import ALIGNMENT_DIMENSIONS
from paco_reward.errors import InputError

__all__ = ["score_alignment"]


def score_alignment(
    scorer: Any, image: Any, texts: dict[str, list[str]], *, mode: str, key: str = "image"
) -> dict[str, float | None]:
    """The per-dimension VQAScore of one image against its texts.

    A dimension without texts is ``None`` in the default mode (counted in the report's
    coverage); the released code divides by zero there (``reference`` mode says so).
    """
    flat = [t for dim in ALIGNMENT_DIMENSIONS for t in texts.get(dim, [])]
    if mode == "reference":
        empty = [d for d in ALIGNMENT_DIMENSIONS if not texts.get(d)]
        if empty:
            raise InputError(
                f"{key}: no {empty} texts; the released vqa_alignment.py fails here "
                "(ZeroDivisionError / KeyError). Use the default mode, which skips and counts it."
            )
    scores = [float(s) for s in scorer.score([image], [flat])[0]] if flat else []
    out: dict[str, float | None] = {}
    start = 0
    for dim in ALIGNMENT_DIMENSIONS:
        n = len(texts.get(dim, []))
        out[dim] = sum(scores[start:start + n]) / n if n else None
        start += n
    return out
