"""The toy relational pairs: balanced, and the label is not readable from one image."""

from __future__ import annotations

import collections

import numpy as np

from paco_reward.templates import build_messages, format_answer, render_instruction
from paco_reward.training.toy import COLOURS, colour_pair_splits, colour_pairs


def test_label_is_independent_of_each_image_alone():
    ds = colour_pairs(1200, seed=2)
    assert abs(np.mean(ds["label"]) - 0.5) < 0.01
    for position in ("first", "second"):
        by_colour = collections.defaultdict(list)
        for reasons, label in zip(ds["reasons"], ds["label"]):
            first, second = (part.split(" is ")[1].strip(".") for part in reasons.split(", "))
            by_colour[first if position == "first" else second].append(label)
        assert set(by_colour) == set(COLOURS)
        for labels in by_colour.values():
            assert abs(np.mean(labels) - 0.5) < 0.12  # ~100 rows per colour


def test_rows_follow_the_pair_schema():
    ds = colour_pairs(4, seed=0, template="consistency", prompt="a square")
    row = ds[0]
    instruction = render_instruction("consistency", "a square")
    expected = build_messages(instruction, answer=format_answer(bool(row["label"]), row["reasons"]))
    for got, want in zip(row["messages"], expected):
        assert got["role"] == want["role"]
        assert [p["type"] for p in got["content"]] == [p["type"] for p in want["content"]]
        assert got["content"][-1]["text"] == want["content"][-1]["text"]
    assert row["image_a"].size == (28, 28) and row["source"] == "toy"


def test_splits_are_disjoint_and_seeded():
    a = colour_pair_splits(20, 10, seed=1)
    b = colour_pair_splits(20, 10, seed=1)
    assert a["train"]["pair_id"] == b["train"]["pair_id"]
    assert not set(a["train"]["prompt_id"]) & set(a["test"]["prompt_id"])
