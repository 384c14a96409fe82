"""The pair schema: one row per (image A, image B, instruction, Yes/No label, reasons).

The data pipeline exports it, the SFT trainer and its collator read it, and the toy task
generates it. ``messages`` is exactly :func:`paco_reward.templates.build_messages` of the
row's instruction with the answer :func:`paco_reward.templates.format_answer`.

    >>> PAIR_COLUMNS[:3]
    ['pair_id', 'prompt_id', 'image_a']
"""

from __future__ import annotations

PAIR_COLUMNS = [
    "pair_id",
    "prompt_id",
    "image_a",
    "image_b",
    "template",
    "prompt",
    "label",
    "reasons",
    "messages",
    "category",
    "source",
]


def pair_features():
    """The ``datasets.Features`` of the pair schema (images as ``datasets.Image``)."""
    from datasets import Features, Image, List, Value

    part = {"type": Value("string"), "text": Value("string")}
    return Features(
        {
            "pair_id": Value("string"),
            "prompt_id": Value("string"),
            "image_a": Image(),
            "image_b": Image(),
            "template": Value("string"),
            "prompt": Value("string"),
            "label": Value("int32"),
            "reasons": Value("string"),
            "messages": List({"role": Value("string"), "content": List(part)}),
            "category": Value("string"),
            "source": Value("string"),
        }
    )
