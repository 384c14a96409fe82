"""Stage: train the tiny evaluator (SFT with the reasons-first curriculum) and compare it
with a pixel-similarity baseline on held-out pairs.

Data: the data stage's export (``ctx.artifacts["pair_dataset_dir"]``) when present, else
relational coloured-square pairs ("same colour?"; the label is not readable from one image).
With the export, the held-out prompts are scored twice: against the simulated annotators'
(relative) labels, and against ground-truth labels (``export/truth``: identical panels vs
panels two or more attributes apart).
Sets ``ctx.artifacts["trained_evaluator"]`` to the saved model folder (a plain Hugging Face
folder: PacoReward.from_pretrained / vLLM load it).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from demo.context import DemoContext, print_table
from paco_reward import PacoReward
from paco_reward.images import load_image
from paco_reward.training import PacoSFTConfig
from paco_reward.training.cli import run_training
from paco_reward.training.loading import load_pair_dataset_dict
from paco_reward.training.metrics import decision_metrics, roc_auc
from paco_reward.training.sft_config import TOY_DATASET


def _pixel_similarity(rows) -> np.ndarray:
    """Baseline score: minus the mean absolute pixel difference at 32x32."""
    scores = []
    for row in rows:
        a, b = (
            np.asarray(load_image(row[c]).resize((32, 32)), dtype=np.float32) / 255.0
            for c in ("image_a", "image_b")
        )
        scores.append(-np.abs(a - b).mean())
    return np.array(scores)


def _baseline(train, test) -> dict[str, float]:
    """Pixel similarity with the accuracy-maximising threshold chosen on the train split."""
    train_scores, test_scores = _pixel_similarity(train), _pixel_similarity(test)
    train_labels, test_labels = np.array(train["label"]), np.array(test["label"])
    candidates = np.unique(train_scores)
    accuracy = [((train_scores >= t) == train_labels).mean() for t in candidates]
    threshold = candidates[int(np.argmax(accuracy))]
    return {
        "accuracy": float(((test_scores >= threshold) == test_labels).mean()),
        "roc_auc": roc_auc(test_scores, test_labels),
    }


def _score(rm: PacoReward, rows) -> np.ndarray:
    """``PacoReward.score_pairs`` of every row, grouped by template."""
    scores = np.full(len(rows), np.nan)
    for template in sorted(set(rows["template"])):
        index = [i for i, t in enumerate(rows["template"]) if t == template]
        chosen = rows.select(index)
        pairs = [(r["image_a"], r["image_b"], r["prompt"] or None) for r in chosen]
        scores[index] = rm.score_pairs(pairs, template=template)
    return scores


def run(ctx: DemoContext) -> None:
    data_dir = ctx.artifacts.get("pair_dataset_dir")
    output_dir = ctx.path("models", "tiny-trained")
    common = dict(
        output_dir=str(output_dir),
        # Built from scratch by the trainer (tiny_model=True; tiny_vision picks the tower).
        model_name_or_path=str(ctx.path("models", "tiny-scratch")),
        tiny_model=True,
        use_lora=False,
        freeze_vision_tower=False,
        freeze_merger=False,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        per_device_train_batch_size=16,
        per_device_eval_batch_size=64,
        first_token_weight=0.5,
        logging_steps=100,
        eval_strategy="steps",
        eval_steps=500,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=ctx.seed,
    )
    if data_dir is not None:
        name = f"synthetic world export ({data_dir})"
        config = PacoSFTConfig(
            dataset_path=str(data_dir),
            image_min_pixels=56 * 56,  # 4 vision tokens per 64-px panel
            image_max_pixels=56 * 56,
            reasoning_warmup_steps=2500,
            max_steps=3500,
            **common,
        )
        splits = load_pair_dataset_dict(data_dir)
        truth_dir = Path(data_dir) / "truth"
    else:
        name = "relational toy pairs (same colour?)"
        config = PacoSFTConfig(
            dataset_path=TOY_DATASET,
            tiny_vision="base",
            toy_train_size=3000,
            toy_test_size=200,
            image_min_pixels=28 * 28,
            image_max_pixels=28 * 28,
            reasoning_warmup_steps=700,
            max_steps=950,
            **common,
        )
        from paco_reward.training.toy import colour_pair_splits

        splits = colour_pair_splits(3000, 200, seed=ctx.seed)
        truth_dir = None
    print(
        f"Training a from-scratch tiny Qwen2.5-VL on {name}: "
        f"{config.reasoning_warmup_steps} reasons-first steps, then "
        f"{config.max_steps - config.reasoning_warmup_steps} answer-first steps."
    )
    start = time.perf_counter()
    metrics = run_training(config)
    elapsed = time.perf_counter() - start
    ctx.artifacts["trained_evaluator"] = output_dir

    # The trained model through the public scorer (what GRPO will call).
    rm = PacoReward.from_pretrained(output_dir)
    evaluations = [("held-out pairs, annotator labels", splits["train"], splits["test"])]
    if truth_dir is not None and truth_dir.is_dir():
        # Ground-truth labels of held-out panels (identical vs >= 2 attributes apart): what the
        # evaluator learned, without the relative labels' noise.
        truth = load_pair_dataset_dict(truth_dir)["test"]
        evaluations.append(("held-out pairs, ground-truth labels", splits["train"], truth))
    rows = []
    for label_kind, train, test in evaluations:
        baseline = _baseline(train, test)
        scored = decision_metrics(_score(rm, test), np.array(test["label"]))
        rows += [
            [label_kind, len(test), "pixel similarity (baseline)", baseline["accuracy"],
             baseline["roc_auc"], "-", "-"],
            [label_kind, len(test), "tiny PaCo evaluator (PacoReward.score)",
             scored["score_accuracy"], scored["roc_auc"], scored["p_yes_on_yes"],
             scored["p_yes_on_no"]],
        ]  # fmt: skip
    rows.append(
        [evaluations[0][0], len(splits["test"]), "tiny PaCo evaluator (teacher-forced, trainer)",
         metrics["eval_decision_accuracy"], metrics["eval_roc_auc"], metrics["eval_p_yes_on_yes"],
         metrics["eval_p_yes_on_no"]]
    )  # fmt: skip
    print_table(
        f"Tiny evaluator vs baseline (trained {elapsed:.0f}s on CPU)",
        ["labels", "pairs", "evaluator", "accuracy", "ROC-AUC", "P(Yes) | Yes", "P(Yes) | No"],
        rows,
    )
    if "label_ceiling" in ctx.artifacts:
        print(
            f"Annotator labels are relative to each ranking: a perfect judge of the two images "
            f"reaches {ctx.artifacts['label_ceiling']:.3f} on them (data stage, label_ceiling)."
        )
    example = splits["test"][0]
    judgement = rm.explain(
        example["image_a"],
        example["image_b"],
        example["prompt"] or None,
        template=example["template"],
        max_new_tokens=60,
    )
    print(f"\nexplain() on a held-out pair (label {example['label']}): {judgement.text!r}")
    print(f"Model, metrics.jsonl, loss_curve.png and README.md in {output_dir}/")
