"""Stage: train the tiny evaluator and compare it with image-similarity baselines on
held-out pairs.

With the data stage's export (the synthetic world) training has two steps:

1. STAND-IN PRETRAINING, not PaCo (:mod:`paco_reward.testing.standin`). A real PaCo-Reward
   starts from Qwen2.5-VL-7B-Instruct, which already reads images; the tiny Qwen2.5-VL
   starts from random weights. So it first learns to describe single panels of the world
   ("Describe the image." → "Shape circle, colour red, ...") from their ground truth: no
   pairs, no consistency labels. The result is cached per machine (``PACO_RL_CACHE``,
   default ``~/.cache/paco-rl``) and reused by later runs with the same settings.
2. PaCo SFT, this library's :class:`~paco_reward.training.PacoSFTTrainer`, on the data
   stage's pair export (simulated annotators' labels, attribute-by-attribute reasons;
   a quarter of the pairs ask ConsistencyRank's theme-free ``rank`` question), starting
   from the stand-in.

The trained evaluator is then scored through ``PacoReward.score`` on the held-out prompts,
against ground-truth labels (``export/truth``: identical panels vs panels two or more
attributes apart) and against the annotators' labels, next to pixel similarity and tiny
CLIP-I. Without the export it trains on relational coloured-square pairs (toy task).
Sets ``ctx.artifacts["trained_evaluator"]`` (a plain Hugging Face folder) and
``ctx.artifacts["tiny_clip"]``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from demo.context import DemoContext, print_table
from paco_reward import PacoReward
from paco_reward.baselines import CLIPImageScorer, PixelScorer
from paco_reward.testing.clip import build_tiny_clip
from paco_reward.training import PacoSFTConfig
from paco_reward.training.cli import run_training
from paco_reward.training.loading import load_pair_dataset_dict
from paco_reward.training.metrics import decision_metrics, roc_auc
from paco_reward.training.sft_config import TOY_DATASET

# The model's view of a 64-px panel: 112 x 112 pixels, 16 vision tokens.
IMAGE_PIXELS = 112 * 112
STANDIN_STEPS = 1600
SFT_WARMUP_STEPS = 500
SFT_STEPS = 1500


def cache_dir() -> Path:
    """Where the stand-in pretraining is cached (``PACO_RL_CACHE``, else ~/.cache/paco-rl)."""
    return Path(os.environ.get("PACO_RL_CACHE") or Path.home() / ".cache" / "paco-rl")


def standin_model(seed: int, world, steps: int = STANDIN_STEPS, progress: bool = True) -> Path:
    """The stand-in-pretrained tiny Qwen2.5-VL for ``world`` (cached; trained when missing)."""
    from data_pipeline.synthetic import WORLD_VERSION
    from paco_reward.testing.standin import StandInConfig, pretrain_describer

    config = StandInConfig(steps=steps, image_pixels=IMAGE_PIXELS, seed=seed)
    data_id = (
        f"synthetic-world-v{WORLD_VERSION}:size={world.panel_size}:pose={world.pose}"
        f":lighting={world.lighting}"
    )
    key = config.key(data_id)
    return pretrain_describer(
        cache_dir() / "standin" / key, world.describe_example, config, data_id, progress
    )


def sft_config(output_dir: Path, base: Path, data_dir: Path, seed: int, **overrides):
    """The PaCo SFT of the demo: full fine-tuning from the stand-in, reasons-first
    warm-up then answer-first (α = 0.5), 16 pairs per step."""
    values = dict(
        output_dir=str(output_dir),
        model_name_or_path=str(base),
        dataset_path=str(data_dir),
        use_lora=False,
        freeze_vision_tower=False,
        freeze_merger=False,
        image_min_pixels=IMAGE_PIXELS,
        image_max_pixels=IMAGE_PIXELS,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        per_device_train_batch_size=16,
        per_device_eval_batch_size=64,
        first_token_weight=0.5,
        reasoning_warmup_steps=SFT_WARMUP_STEPS,
        max_steps=SFT_STEPS,
        logging_steps=50,
        eval_strategy="steps",
        eval_steps=250,
        max_eval_samples=512,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=seed,
    )
    values.update(overrides)
    return PacoSFTConfig(**values)


def _score(rm: PacoReward, rows) -> np.ndarray:
    """``PacoReward.score_pairs`` of every row, each with its own template."""
    scores = np.full(len(rows), np.nan)
    for template in sorted(set(rows["template"])):
        index = [i for i, t in enumerate(rows["template"]) if t == template]
        chosen = rows.select(index)
        pairs = [(r["image_a"], r["image_b"], r["prompt"] or None) for r in chosen]
        scores[index] = rm.score_pairs(pairs, template=template)
    return scores


def best_threshold_accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy of the best threshold on ``scores``, chosen on these very pairs (an upper
    bound for a baseline that has no threshold of its own)."""
    labels = np.asarray(labels).astype(bool)
    return float(max(((scores >= t) == labels).mean() for t in np.unique(scores)))


def compare(rm: PacoReward, rows, clip: CLIPImageScorer) -> list[dict]:
    """Accuracy and ROC-AUC of the evaluator (P(Yes) >= 0.5) and the two baselines."""
    labels = np.array(rows["label"])
    pairs = [(r["image_a"], r["image_b"]) for r in rows]
    out = []
    for name, scorer in (("pixel similarity (Pixel L1)", PixelScorer()), ("tiny CLIP-I", clip)):
        scores = scorer.score_pairs(pairs)
        out.append(
            {
                "method": name,
                "accuracy": best_threshold_accuracy(scores, labels),
                "roc_auc": roc_auc(scores, labels),
            }
        )
    scored = decision_metrics(_score(rm, rows), labels)
    out.append(
        {
            "method": "tiny PaCo evaluator (PacoReward.score)",
            "accuracy": scored["score_accuracy"],
            "roc_auc": scored["roc_auc"],
            "p_yes_on_yes": scored["p_yes_on_yes"],
            "p_yes_on_no": scored["p_yes_on_no"],
        }
    )
    return out


def run(ctx: DemoContext) -> None:
    data_dir = ctx.artifacts.get("pair_dataset_dir")
    output_dir = ctx.path("models", "tiny-trained")
    clip_dir = build_tiny_clip(ctx.path("models", "tiny-clip"), seed=ctx.seed)
    ctx.artifacts["tiny_clip"] = clip_dir
    if data_dir is None:
        _run_toy(ctx, output_dir)
        return
    from data_pipeline.pipeline import load_synthetic_config

    world = load_synthetic_config(Path(data_dir).parent).world()
    print(
        "Step 1/2, STAND-IN PRETRAINING (not PaCo): the from-scratch tiny Qwen2.5-VL learns to "
        f"describe single panels of the world ({STANDIN_STEPS} steps of 32 panels; cached in "
        f"{cache_dir()})."
    )
    cpu, start = time.process_time(), time.perf_counter()
    base = standin_model(ctx.seed, world)
    from paco_reward.testing.standin import read_standin_info

    info = read_standin_info(base)
    readout = info["readout_accuracy"]
    print(
        f"Stand-in at {base}: trained {info['train_seconds']:.0f}s; greedy read-out of "
        f"{info['config']['eval_examples']} fresh panels: "
        + ", ".join(f"{k} {v:.2f}" for k, v in readout.items())
    )
    print(
        f"Step 2/2, PaCo SFT (PacoSFTTrainer) on {data_dir}: {SFT_WARMUP_STEPS} reasons-first "
        f"steps, then {SFT_STEPS - SFT_WARMUP_STEPS} answer-first steps (α = 0.5)."
    )
    run_training(sft_config(output_dir, base, data_dir, ctx.seed, disable_tqdm=False))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    ctx.artifacts["trained_evaluator"] = output_dir

    rm = PacoReward.from_pretrained(output_dir)
    clip = CLIPImageScorer(clip_dir)
    splits = load_pair_dataset_dict(data_dir)
    truth = load_pair_dataset_dict(Path(data_dir) / "truth")["test"]
    rows = []
    results = {}
    for kind, data in (
        ("held-out pairs, ground-truth labels", truth),
        ("held-out pairs, annotator labels", splits["test"]),
    ):
        results[kind] = compare(rm, data, clip)
        for r in results[kind]:
            rows.append(
                [kind, len(data), r["method"], r["accuracy"], r["roc_auc"],
                 r.get("p_yes_on_yes", "-"), r.get("p_yes_on_no", "-")]
            )  # fmt: skip
    ctx.artifacts["train_results"] = results
    print_table(
        f"Tiny evaluator vs image-similarity baselines on held-out prompts (stand-in + PaCo SFT: "
        f"{elapsed:.0f}s wall, {cpu:.0f}s CPU)",
        ["labels", "pairs", "method", "accuracy", "ROC-AUC", "P(Yes) | Yes", "P(Yes) | No"],
        rows,
    )
    print(
        "Evaluator accuracy: P(Yes) >= 0.5. Baseline accuracy: their best threshold chosen on "
        "the same pairs (an upper bound). Annotator labels are relative to each ranking: a "
        f"perfect judge reaches {ctx.artifacts.get('label_ceiling', float('nan')):.3f} on them."
    )
    example = truth[0]
    judgement = rm.explain(
        example["image_a"], example["image_b"], example["prompt"] or None, max_new_tokens=80
    )
    print(f"\nexplain() on a held-out pair (label {example['label']}): {judgement.text!r}")
    print(f"Model, metrics.jsonl, loss_curve.png and README.md in {output_dir}/")


def _run_toy(ctx: DemoContext, output_dir: Path) -> None:
    """Without the data stage: relational coloured-square pairs ("same colour?")."""
    from paco_reward.training.toy import colour_pair_splits

    config = PacoSFTConfig(
        output_dir=str(output_dir),
        model_name_or_path=str(ctx.path("models", "tiny-scratch")),
        tiny_model=True,
        tiny_vision="base",
        dataset_path=TOY_DATASET,
        toy_train_size=3000,
        toy_test_size=200,
        use_lora=False,
        freeze_vision_tower=False,
        freeze_merger=False,
        image_min_pixels=28 * 28,
        image_max_pixels=28 * 28,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        per_device_train_batch_size=16,
        per_device_eval_batch_size=64,
        first_token_weight=0.5,
        reasoning_warmup_steps=700,
        max_steps=950,
        logging_steps=100,
        eval_strategy="steps",
        eval_steps=500,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=ctx.seed,
    )
    print("Training a from-scratch tiny Qwen2.5-VL on relational toy pairs (same colour?).")
    metrics = run_training(config)
    ctx.artifacts["trained_evaluator"] = output_dir
    splits = colour_pair_splits(3000, 200, seed=ctx.seed)
    rm = PacoReward.from_pretrained(output_dir)
    test = splits["test"]
    scored = decision_metrics(_score(rm, test), np.array(test["label"]))
    print_table(
        "Tiny evaluator on held-out toy pairs",
        ["evaluator", "accuracy", "ROC-AUC"],
        [
            ["PacoReward.score", scored["score_accuracy"], scored["roc_auc"]],
            [
                "teacher-forced (trainer)",
                metrics["eval_decision_accuracy"],
                metrics["eval_roc_auc"],
            ],
        ],
    )
