"""Stage: PaCo SFT of the tiny evaluator, compared with image-similarity baselines on
held-out pairs.

With the data stage's export (the synthetic world) this stage runs this library's
:class:`~paco_reward.training.PacoSFTTrainer` on the pair export (simulated annotators'
labels, attribute-by-attribute reasons, Yes and No balanced in the train split; a quarter of
the pairs ask ConsistencyRank's theme-free ``rank`` question). It starts from the standin
stage's model (STAND-IN PRETRAINING, not PaCo: the tiny model learned to describe single
panels there), as a user starts from Qwen2.5-VL. The SFT runs as a user runs it:
``paco-reward train RECIPE`` on two processes (``torchrun``, gloo on CPU), the recipe
written next to the model.

The trained evaluator is then scored through ``PacoReward.score`` on the held-out prompts,
against ground-truth labels (``export/truth``: identical panels vs panels two or more
attributes apart) and against the annotators' labels, next to pixel similarity and tiny
CLIP-I. Its generated reasons are checked on :data:`EXPLAINED_PAIRS` of the held-out
ground-truth pairs (:func:`reasons_agreement`): how often they are the world's clauses
("Shape same, circle and circle; ..."), how often the answer agrees with them (Yes exactly
when every clause says same) and how often the answer is right. Without the export it trains
on relational coloured-square pairs (toy task). Sets ``ctx.artifacts["trained_evaluator"]``
(a plain Hugging Face folder), ``ctx.artifacts["tiny_clip"]``,
``ctx.artifacts["train_results"]`` and ``ctx.artifacts["train_reasons"]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from data_pipeline.reasons import parse_attribute_comparison
from data_pipeline.synthetic import attribute_words
from demo.context import DemoContext, ReportSection, print_table
from demo.documented import documented
from demo.stage_standin import IMAGE_PIXELS, standin_model, world_of
from paco_reward import PacoReward
from paco_reward.baselines import CLIPImageScorer, PixelScorer
from paco_reward.testing.clip import build_tiny_clip
from paco_reward.training import PacoSFTConfig, run_training
from paco_reward.training.loading import load_pair_dataset_dict
from paco_reward.training.metrics import decision_metrics, roc_auc
from paco_reward.training.sft_config import TOY_DATASET

SFT_STEPS = 400
# Data-parallel processes of the SFT: torch gains nothing from a second thread on models
# this small, a second process doubles the pairs per second. Fixed, so that every machine
# computes the same numbers.
PROCESSES = 2
# Where the evaluator trained on the data stage's pairs goes, and its recipe beside it.
EVALUATOR_DIR = ("models", "tiny-trained")
EVALUATOR_RECIPE = ("models", "tiny-trained.yaml")
# Held-out ground-truth pairs whose reasons are generated (half Yes, half No): about half a
# second each on one core, greedy, up to REASON_TOKENS tokens (a full reason takes about 80).
EXPLAINED_PAIRS = 48
REASON_TOKENS = 100


def sft_recipe(
    output_dir: Path, base: Path, data_dir: Path, seed: int, steps: int = SFT_STEPS, **overrides
) -> dict:
    """The demo's PaCo SFT recipe (``PacoSFTConfig`` fields): ``steps`` steps of full
    fine-tuning from ``base`` with its vision tower frozen, answer-first targets (α = 0.5), 16
    pairs per process and step, the learning rate decayed over the last third."""
    recipe = dict(
        output_dir=str(output_dir),
        model_name_or_path=str(base),
        dataset_path=str(data_dir),
        use_lora=False,
        freeze_vision_tower=True,
        freeze_merger=False,
        image_min_pixels=IMAGE_PIXELS,
        image_max_pixels=IMAGE_PIXELS,
        first_token_weight=0.5,
        reasoning_warmup_steps=0,
        learning_rate=1e-3,
        lr_scheduler_type="warmup_stable_decay",
        lr_scheduler_kwargs={"num_decay_steps": steps // 3},
        warmup_steps=50,
        max_steps=steps,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=64,
        logging_steps=50,
        eval_strategy="steps",
        eval_steps=steps // 2,
        max_eval_samples=512,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        ddp_find_unused_parameters=False,
        seed=seed,
        overwrite_output_dir=True,  # the demo trains its stages afresh in its own folders
    )
    recipe.update(overrides)
    PacoSFTConfig(**recipe)  # fail here, not in the workers, on a bad field
    return recipe


def trained_evaluator(ctx: DemoContext) -> Path | None:
    """The evaluator this stage trained on the data stage's pairs, in this run or an earlier
    one in the same output folder (its folder beside its recipe); None without one."""
    folder = ctx.output_dir.joinpath(*EVALUATOR_DIR)
    recipe = ctx.output_dir.joinpath(*EVALUATOR_RECIPE)
    return folder if (folder / "config.json").is_file() and recipe.is_file() else None


def train_distributed(recipe: dict, recipe_path: Path, processes: int = PROCESSES) -> str:
    """Write ``recipe`` as YAML and run ``paco-reward train`` on it in ``processes``
    data-parallel processes, at this process's priority (:mod:`demo.keep_priority`);
    returns the command."""
    recipe_path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={processes}", "-m", "demo.keep_priority",
        "paco_reward.cli", "train", str(recipe_path),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env)
    return " ".join(command[1:])


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


def explained_rows(labels: list[int], n: int = EXPLAINED_PAIRS, seed: int = 0) -> list[int]:
    """Indices of ``n`` rows, half with label 1 and half with label 0 (as many as there are),
    drawn with ``seed``, in index order."""
    rng = np.random.default_rng(seed)
    chosen = []
    for label in (1, 0):
        index = [i for i, y in enumerate(labels) if y == label]
        chosen += rng.choice(index, size=min(n // 2, len(index)), replace=False).tolist()
    return sorted(chosen)


def reasons_agreement(rm: PacoReward, rows, n: int = EXPLAINED_PAIRS, seed: int = 0) -> dict:
    """Generate the judgement of ``n`` rows (:func:`explained_rows`) and read its reasons as
    the world's clauses (:func:`data_pipeline.reasons.parse_attribute_comparison`, the
    world's words).

    Returns ``{"pairs", "parsed", "agree", "agree_values", "answer_right", "clauses_right",
    "example"}``: the share of judgements whose reasons parse (every attribute once, in the
    world's words); of those, the share whose answer agrees with its clauses (Yes exactly
    when every clause says same), the share whose answer agrees with the values the clauses
    name (Yes exactly when every clause names one value twice) and the share of clauses
    whose verdict (same / different) is the ground truth's (the row's own reasons); the share
    of answers equal to the label (over all ``n``); and the first judgement, as ``{"label",
    "text", "parsed", "agrees"}``.
    """
    words = attribute_words()
    chosen = explained_rows(list(rows["label"]), n, seed)
    parsed = agree = agree_values = right = clauses_right = clauses = 0
    example = None
    for i in chosen:
        row = rows[i]
        judgement = rm.explain(
            row["image_a"], row["image_b"], row["prompt"] or None,
            template=row["template"], max_new_tokens=REASON_TOKENS,
        )  # fmt: skip
        answer = judgement.answer.lower()
        right += answer == ("yes" if row["label"] else "no")
        said = parse_attribute_comparison(judgement.reasons, words)
        agrees = None
        if said is not None:
            parsed += 1
            agrees = answer == ("yes" if all(same for _, same, _, _ in said) else "no")
            agree += agrees
            agree_values += answer == ("yes" if all(a == b for _, _, a, b in said) else "no")
            truth = parse_attribute_comparison(row["reasons"] or "", words) or []
            verdicts = {k: same for k, same, _, _ in truth}
            if verdicts:  # the ground truth's own clauses (every truth pair has them)
                clauses_right += sum(same == verdicts[k] for k, same, _, _ in said)
                clauses += len(said)
        if example is None:
            example = {
                "label": row["label"], "text": judgement.text,
                "parsed": said is not None, "agrees": agrees,
            }  # fmt: skip
    total = len(chosen)
    return {
        "pairs": total,
        "parsed": parsed / total,
        "agree": agree / parsed if parsed else float("nan"),
        "agree_values": agree_values / parsed if parsed else float("nan"),
        "answer_right": right / total,
        "clauses_right": clauses_right / clauses if clauses else float("nan"),
        "example": example,
    }


def run(ctx: DemoContext) -> None:
    data_dir = ctx.artifacts.get("pair_dataset_dir")
    output_dir = ctx.path(*EVALUATOR_DIR)
    clip_dir = build_tiny_clip(ctx.path("models", "tiny-clip"), seed=ctx.seed)
    ctx.artifacts["tiny_clip"] = clip_dir
    if data_dir is None:
        _run_toy(ctx, output_dir)
        return
    base = ctx.artifacts.get("base_model") or standin_model(ctx.seed, world_of(data_dir))
    recipe = sft_recipe(output_dir, base, data_dir, ctx.seed)
    print(
        f"PaCo SFT (PacoSFTTrainer) from the stand-in {base} on {data_dir}: "
        f"{recipe['max_steps']} answer-first steps (α = {recipe['first_token_weight']}), "
        f"{PROCESSES} processes."
    )
    start = time.perf_counter()
    command = train_distributed(recipe, ctx.path(*EVALUATOR_RECIPE))
    elapsed = time.perf_counter() - start
    print(f"Trained in {elapsed:.0f}s with: {command}")
    ctx.artifacts["trained_evaluator"] = output_dir
    evaluate(ctx, PacoReward.from_pretrained(output_dir), data_dir, clip_dir, elapsed)
    print(f"Model, metrics.jsonl, loss_curve.png and README.md in {output_dir}/")


def evaluate(ctx: DemoContext, rm: PacoReward, data_dir, clip_dir: Path, elapsed: float) -> None:
    """The trained evaluator ``rm`` against the baselines on the held-out pairs of the export
    ``data_dir`` (ground-truth and annotator labels) and its reasons
    (:func:`reasons_agreement`): tables for the report, the headline figures next to their
    documented ranges (:mod:`demo.documented`), ``ctx.artifacts["train_results"]`` and
    ``ctx.artifacts["train_reasons"]``."""
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
    ctx.table(
        ReportSection(
            "The tiny evaluator against image similarity",
            f"Tiny evaluator (PaCo SFT, {elapsed:.0f}s) vs image-similarity baselines on "
            "held-out prompts",
            ["labels", "pairs", "method", "accuracy", "ROC-AUC", "P(Yes) | Yes", "P(Yes) | No"],
            rows,
        )
    )
    print(
        "Evaluator accuracy: P(Yes) >= 0.5. Baseline accuracy: their best threshold chosen on "
        "the same pairs (an upper bound). Annotator labels are relative to each ranking: a "
        f"perfect judge reaches {ctx.artifacts.get('label_ceiling', float('nan')):.3f} on them."
    )
    paco = results["held-out pairs, ground-truth labels"][-1]
    print(documented("train.truth_accuracy", paco["accuracy"]))
    print(documented("train.truth_roc_auc", paco["roc_auc"]))

    start = time.perf_counter()
    reasons = reasons_agreement(rm, truth, n=EXPLAINED_PAIRS, seed=ctx.seed)
    ctx.artifacts["train_reasons"] = reasons
    ctx.table(
        ReportSection(
            "The tiny evaluator's reasons",
            f"explain() on {reasons['pairs']} held-out ground-truth pairs (half Yes), greedy, "
            f"{time.perf_counter() - start:.0f}s: reasons in the world's clauses; of those, "
            "answers agreeing with their verdicts (Yes exactly when every clause says same) "
            "and with the values they name (Yes exactly when each names one value twice), and "
            "clause verdicts equal to the ground truth's; answers equal to the label",
            ["pairs", "reasons parse", "answer agrees with the verdicts", "with the values",
             "clause verdicts right", "answer right"],
            [[reasons["pairs"], reasons["parsed"], reasons["agree"], reasons["agree_values"],
              reasons["clauses_right"], reasons["answer_right"]]],
        )
    )  # fmt: skip
    print(documented("train.reasons_agree", reasons["agree"]))
    example = reasons["example"]
    print(
        f"For example (label {example['label']}; reasons parse: {example['parsed']}, answer "
        f"agrees with them: {example['agrees']}): {example['text']!r}"
    )


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
        overwrite_output_dir=True,  # the demo trains its stages afresh in its own folders
    )
    # Not an evaluator of the world's renders: no recipe beside it (see trained_evaluator).
    ctx.path(*EVALUATOR_RECIPE).unlink(missing_ok=True)
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
