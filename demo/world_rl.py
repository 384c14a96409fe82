"""PaCo-GRPO on the world's generator (or editor), judged by the world's oracle.

:func:`run_world_grpo` trains a LoRA on the pretrained world generator
(:mod:`demo.world_generator`) with :class:`paco_grpo.grpo_trainer.GRPOTrainer` and the
rewards it is given, and has the oracle (:mod:`demo.world_judge`) judge the grids the
generator draws for held-out prompts before training and after it (EMA weights, ODE
sampling, the same initial noise). The oracle is never a reward: it only judges. With
``task=EditTask(world)`` the same loop trains the world's editor
(:mod:`demo.world_editor`) on edits and the oracle judges its edits.

    >>> run = run_world_grpo(generator, {"consistency": ConsistencyReward(evaluator)},
    ...                      {"consistency": 1.0}, train_records, test_records, out)  # doctest: +SKIP
    >>> paired_gain(run["before"], run["after"], "consistency")                        # doctest: +SKIP
    {'mean': 0.08, 'se': 0.02, 'low': 0.04, 'high': 0.12}
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from data_pipeline.storage import write_jsonl
from demo.world_generator import quiet_clip_truncation, sample_grids
from demo.world_judge import judge_grids

# What a GRPO prompt file keeps of a world prompt record.
PROMPT_FIELDS = ("idx", "prompt", "layout", "theme", "height", "width")
# The world's GRPO recipe; a run sets model, prompts, output, rewards and seed on top.
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo_world_cpu.yaml"
JUDGE_STEPS = 20


def write_prompt_file(records: Sequence[dict], path: str | Path) -> Path:
    """World prompt records as a T2IS JSONL prompt file for the trainer."""
    write_jsonl(path, [{k: r[k] for k in PROMPT_FIELDS} for r in records])
    return Path(path)


class GridTask:
    """Text-to-image-set RL on the world generator: what :func:`run_world_grpo` trains on
    (T2IS prompt records) and how the oracle judges it (:func:`demo.world_judge.judge_grids`
    of the grids drawn at the test resolution)."""

    recipe = RECIPE

    def write_prompts(self, records: Sequence[dict], folder: Path) -> Path:
        """The trainer's prompt file of ``records``, written in ``folder``."""
        return write_prompt_file(records, folder / "train_prompts.jsonl")

    def judge(self, trainer, records: Sequence[dict], seed: int) -> dict:
        images = sample_grids(
            trainer.sampler.pipe,
            records,
            seed,
            num_steps=JUDGE_STEPS,
            size=trainer.config.test.resolution,
            max_sequence_length=trainer.config.max_sequence_length,
            transformer=trainer.accelerator.unwrap_model(trainer.model),
        )
        return {**judge_grids(images, records), "images": images}


def run_world_grpo(
    generator: str | Path,
    rewards: dict,
    weights: dict[str, float],
    train_records: Sequence[dict],
    test_records: Sequence[dict],
    output_dir: str | Path,
    seed: int = 0,
    aggregator: str = "log_tamed",
    overrides: dict[str, Any] | None = None,
    task: Any = None,
) -> dict:
    """Train with ``rewards`` (weighted by ``weights``) on ``train_records`` and judge the
    policy on ``test_records`` before and after. ``task`` says what the records are, which
    recipe trains on them and how the oracle judges (default :class:`GridTask`; editing:
    :class:`demo.world_editor.EditTask`); ``overrides`` update its recipe (dotted keys such
    as ``"train.resolution"``).

    Returns:
        ``{"before", "after"}`` (the task's judgements, with the ``"images"``),
        ``"history"`` (the trainer's metrics per epoch) and ``"seconds"`` (training
        wall-clock).
    """
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer

    task = task or GridTask()
    output_dir = Path(output_dir)
    prompt_file = task.write_prompts(train_records, output_dir)
    fields = {
        "model_name_or_path": str(generator),
        "prompt_file": str(prompt_file),
        "output_dir": str(output_dir),
        "rewards": dict(weights),
        "aggregator": aggregator,
        "seed": seed,
        "overwrite_output_dir": True,  # the demo trains its arms afresh in their own folders
        **(overrides or {}),
    }
    config = GRPOConfig.from_yaml(task.recipe, fields)
    trainer = GRPOTrainer(config, rewards=rewards)
    before = task.judge(trainer, test_records, seed)
    start = time.perf_counter()
    with quiet_clip_truncation():
        history = trainer.train()
    seconds = time.perf_counter() - start
    if trainer.ema is not None:
        trainer.ema.copy_to(trainer.params)
    after = task.judge(trainer, test_records, seed)
    return {"before": before, "after": after, "history": history, "seconds": seconds}


def run_call(weights: dict[str, float], evaluator: str, clip: str | Path, kwargs: dict) -> dict:
    """What makes a world RL run (its reward weights, the reward models and
    :func:`run_world_grpo`'s arguments), without its output folder: two runs with equal calls
    train and judge the same (a stage may take another stage's run for one of its own)."""
    same = {k: v for k, v in kwargs.items() if k != "output_dir"}
    return {"weights": dict(weights), "evaluator": str(evaluator), "clip": str(clip), **same}


def per_prompt_change(before: dict, after: dict, key: str) -> np.ndarray:
    """``after - before`` of ``key`` (e.g. ``"consistency"`` or ``"alignment"``) per prompt."""
    pairs = zip(after["per_item"], before["per_item"], strict=True)
    return np.array([a[key] - b[key] for a, b in pairs])


def mean_interval(values: np.ndarray) -> dict:
    """Mean, standard error and 95 % interval (normal approximation) of ``values``."""
    se = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
    mean = float(values.mean())
    return {"mean": mean, "se": se, "low": mean - 1.96 * se, "high": mean + 1.96 * se}


def paired_gain(before: dict, after: dict, key: str) -> dict:
    """Mean per-prompt change of ``key`` with its standard error and 95 % interval."""
    return mean_interval(per_prompt_change(before, after, key))


def pooled_gain(runs: Sequence[dict], key: str) -> dict:
    """:func:`paired_gain` of the per-prompt change averaged over ``runs`` (seeds: the same
    held-out prompts, so the interval is over prompts, not runs)."""
    changes = [per_prompt_change(r["before"], r["after"], key) for r in runs]
    return mean_interval(np.mean(changes, axis=0))


def run_in_workers(function, tasks: Sequence, workers: int) -> list:
    """``[function(t) for t in tasks]``, ``workers`` at a time in spawned processes (fresh
    interpreters: no torch state or threads inherited from the parent)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        return list(pool.map(function, tasks))
