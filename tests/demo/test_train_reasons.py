"""The train stage's check of its evaluator's reasons: judgements generated for balanced
held-out truth pairs, read back as the world's clauses, the answer compared with them and
with the label."""

from __future__ import annotations

import math

import pytest
from datasets import Dataset
from PIL import Image

from data_pipeline.reasons import attribute_comparison
from demo.stage_train import explained_rows, reasons_agreement
from paco_reward.outputs import Judgement
from paco_reward.reward import split_answer

A = {"shape": "circle", "colour": "red", "marking": "dots", "palette": "warm",
     "texture": "grain", "outline": "none"}  # fmt: skip
B = {**A, "colour": "blue"}
SAME, DIFFERENT = attribute_comparison(A, A), attribute_comparison(A, B)


class Scripted:
    """An evaluator whose judgements are written in advance (one per explained row)."""

    def __init__(self, texts):
        self.texts = list(texts)

    def explain(self, image_a, image_b, prompt=None, *, template=None, max_new_tokens=256):
        assert template == "consistency" and max_new_tokens > 60
        answer, reasons = split_answer(self.texts.pop(0))
        return Judgement(score=0.5, answer=answer, reasons=reasons, text=f"{answer}. {reasons}")


def rows(labels):
    image = Image.new("RGB", (8, 8))
    return Dataset.from_list(
        [
            {
                "image_a": image,
                "image_b": image,
                "prompt": "a character",
                "label": y,
                "template": "consistency",
                "reasons": SAME if y else DIFFERENT,
            }
            for y in labels
        ]
    )


def test_the_pairs_are_balanced_and_fixed_by_the_seed():
    labels = [1] * 30 + [0] * 70
    chosen = explained_rows(labels, 10, seed=3)
    assert chosen == sorted(chosen) == explained_rows(labels, 10, seed=3)
    assert sum(labels[i] for i in chosen) == 5 and len(set(chosen)) == 10
    assert len(explained_rows([1, 0, 0], 10)) == 3  # as many as there are


def test_answers_are_compared_with_their_own_clauses_and_with_the_label():
    data = rows([1, 0, 1, 0, 0])
    # Every verdict "same" while the values differ, as the demo's evaluator often writes.
    same_words = DIFFERENT.replace("colour different", "colour same")
    # In row order (all five explained):
    texts = [
        f"Yes. {SAME}",  # label 1: parses, agrees, right; 6 of 6 clauses right
        f"Yes. {DIFFERENT}",  # label 0: parses, disagrees (colour different), wrong; 6 of 6
        f"No. {DIFFERENT}",  # label 1: parses, agrees, wrong; 5 of 6 (colour is the same)
        "No. The colours differ.",  # label 0: does not parse, right
        f"No. {same_words}",  # label 0: parses, disagrees with the verdicts, agrees with the
        # values (red and blue), right; 5 of 6
    ]
    result = reasons_agreement(Scripted(texts), data, n=6)
    assert result["pairs"] == 5
    assert result["parsed"] == pytest.approx(4 / 5)
    assert result["agree"] == pytest.approx(2 / 4)
    assert result["agree_values"] == pytest.approx(3 / 4)
    assert result["answer_right"] == pytest.approx(3 / 5)
    assert result["clauses_right"] == pytest.approx(22 / 24)
    assert result["example"] == {"label": 1, "text": texts[0], "parsed": True, "agrees": True}


def test_nothing_parses_without_the_worlds_clauses(tiny_model_dir):
    from paco_reward import PacoReward

    result = reasons_agreement(PacoReward.from_pretrained(tiny_model_dir), rows([1, 0]), n=2)
    assert result["parsed"] == 0 and math.isnan(result["agree"])
    assert result["example"]["parsed"] is False


def test_the_stage_reports_its_evaluator_and_prints_it_next_to_the_documented_ranges(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    from data_pipeline.export import ExportConfig
    from data_pipeline.pipeline import SyntheticConfig, run_synthetic
    from demo import stage_train
    from demo.context import DemoContext
    from demo.documented import PAGE
    from paco_reward import PacoReward
    from paco_reward.testing.clip import build_tiny_clip

    work = tmp_path / "data"
    run_synthetic(
        work,
        SyntheticConfig(n_prompts=8, seed=0),
        export=ExportConfig(test_fraction=0.25, seed=0, balance_train_labels=True),
    )
    monkeypatch.setattr(stage_train, "EXPLAINED_PAIRS", 4)
    monkeypatch.setattr(stage_train, "REASON_TOKENS", 8)
    ctx = DemoContext(output_dir=tmp_path / "out")
    clip = build_tiny_clip(tmp_path / "clip", seed=0)
    stage_train.evaluate(
        ctx, PacoReward.from_pretrained(tiny_model_dir), work / "export", clip, 1.0
    )

    assert [section.heading for section in ctx.report] == [
        "The tiny evaluator against image similarity",
        "The tiny evaluator's reasons",
    ]
    (row,) = ctx.report[1].rows
    assert row[0] == ctx.artifacts["train_reasons"]["pairs"] == 4
    printed = capsys.readouterr().out
    for name in ("truth-pair accuracy", "truth-pair ROC-AUC", "answer agrees with its reasons"):
        (line,) = [line for line in printed.splitlines() if line.startswith(name)]
        assert "(documented " in line and PAGE in line
    assert "For example (label " in printed
