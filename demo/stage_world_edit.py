"""Stage: EDITING IN MINIATURE (experiment 5). PaCo-GRPO on the world's tiny Kontext, judged
by the world's oracle.

The world's editor (:mod:`demo.world_editor`, pretrained from the world generator on
"Make the character blue."-style edits of single panels, cached) is trained with PaCo-GRPO
in two arms, two seeds each:

1. PaCo-Reward's editing reward (``edit_consistency``: sqrt(SC * PF) of (source, edit) by
   the evaluator of the generator's grids, stage ``world_evaluator``) with CLIP-T of the edit
   against the text of what it should show (the world's CLIP), log-tamed;
2. CLIP-T alone: a reward for doing the edit and nothing for keeping the rest.

The oracle, never a reward, judges held-out edits before and after (same initial noise,
ODE sampling, EMA weights): ``changed`` (the asked attribute shows the asked value),
``kept`` (the share of the other attributes and the pips still showing the source's values)
and ``success`` (both). The table's first rows calibrate it: the ground-truth edits (the
world's renders) and the unchanged sources.

Writes ``world_edit/rewards.png`` (train rewards per epoch) and
``world_edit/samples_<arm>_seed<k>.png`` (sources, edits before RL, after RL, ground truth).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from data_pipeline.storage import save_image_atomic
from demo import pretrained
from demo.cached_folder import read_info
from demo.context import DemoContext, ReportSection
from demo.documented import documented
from demo.stage_generator import sample_sheet
from demo.stage_world_grpo import gain_cell, plot_runs, reward_means, world_models
from demo.world_editor import (
    EDIT_SCORES,
    HELD_OUT_START,
    INFO_FILE,
    EditTask,
    editor_world,
    judge_edits,
    make_edits,
    render_edit,
)
from demo.world_rl import paired_gain, pooled_gain, run_in_workers, run_world_grpo

SEEDS = (0, 1)
EPOCHS = 6
TRAIN_EDITS = 64
HELD_OUT = 96
# Train edits are drawn from this index on: neither the editor's nor the held-out ones.
TRAIN_START = 200_000
WORKERS = 2
# Recipe fields every run sets on top of recipes/grpo_world_edit_cpu.yaml (tests shrink runs).
RECIPE_OVERRIDES: dict = {}


@dataclass(frozen=True)
class EditArm:
    """One way of training the editor: with PaCo's editing reward or CLIP-T alone."""

    name: str
    slug: str
    paco: bool = True


PACO_EDIT = EditArm("PaCo edit reward + CLIP-T, log-tamed", "paco")
CLIP_T_ONLY = EditArm("CLIP-T only", "clipt", paco=False)
ARMS = (PACO_EDIT, CLIP_T_ONLY)

HEADER = [
    "edits",
    "seed",
    "changed before",
    "after",
    "gain [95 %]",
    "kept before",
    "after",
    "gain [95 %]",
    "success before",
    "after",
    "gain [95 %]",
    "train s",
]


def rewards_of(arm: EditArm, evaluator: str, clip: str) -> dict:
    """The arm's rewards (fresh instances): CLIP-T of the edit against its target text (the
    parquet's ``panel_prompts``), and PaCo's editing reward in arm 1."""
    from paco_grpo.rewards import CLIPTextReward, EditConsistencyReward

    clip_t = {"clip_t": CLIPTextReward(clip, warn_long_text=False)}
    return {"edit_consistency": EditConsistencyReward(evaluator), **clip_t} if arm.paco else clip_t


def _run_arm(task: tuple) -> dict:
    """One (arm, seed) run, in a worker process of its own (one torch thread)."""
    arm, evaluator, clip, kwargs = task
    torch.set_num_threads(1)
    rewards = rewards_of(arm, evaluator, clip)
    return run_world_grpo(rewards=rewards, weights=dict.fromkeys(rewards, 1.0), **kwargs)


def reference_rows(records: list[dict], pairs: list[tuple]) -> list[list]:
    """The oracle on the ground-truth edits and on the unchanged sources (``pairs``: each
    record's rendered source and ground truth)."""
    rows = []
    for name, images in (
        ("ground truth (the world's renders)", [t for _, t in pairs]),
        ("the source, unchanged", [s for s, _ in pairs]),
    ):
        judged = judge_edits(images, records)
        cells = []
        for key in EDIT_SCORES:
            cells += ["", judged[key], ""]
        rows.append([name, "", *cells, ""])
    return rows


def experiment_rows(results: dict[EditArm, dict[int, dict]]) -> list[list]:
    """A row per (arm, seed) and one per arm over both seeds."""
    rows = []
    for arm, runs in results.items():
        for seed, r in runs.items():
            before, after = r["before"], r["after"]
            cells = []
            for key in EDIT_SCORES:
                cells += [before[key], after[key], gain_cell(paired_gain(before, after, key))]
            rows.append([arm.name, seed, *cells, f"{r['seconds']:.0f}"])
        cells = []
        for key in EDIT_SCORES:
            cells += ["", "", gain_cell(pooled_gain(list(runs.values()), key))]
        seconds = np.mean([r["seconds"] for r in runs.values()])
        rows.append([arm.name, "both", *cells, f"{seconds:.0f}"])
    return rows


def reward_rows(
    records: list[dict], sources: list, judged: dict, evaluator: str, clip: str
) -> list:
    """Each reward (SC, PF, PaCo's sqrt(SC * PF), CLIP-T) of the edits ``judged`` (the
    editor's before RL, of ``sources``), and its Pearson r with what the oracle reads in
    them: which reward can teach what."""
    from scipy.stats import pearsonr

    from demo.world_editor import edit_text
    from paco_grpo.rewards import CLIPTextReward
    from paco_grpo.rewards.consistency import load_paco_reward

    images = judged["images"]
    requests = [(s, im, r["prompt"]) for s, im, r in zip(sources, images, records)]
    scorer = load_paco_reward(evaluator)
    sc = np.array(scorer.score_pairs(requests, template="edit_consistency", symmetric=False))
    pf = np.array(scorer.score_pairs(requests, template="edit_following", symmetric=False))
    metadata = [{"panel_prompts": [edit_text(r)], "layout": "1x1"} for r in records]
    clip_t = CLIPTextReward(clip, warn_long_text=False)(
        images, [r["prompt"] for r in records], metadata
    )
    oracle = [[item[key] for item in judged["per_item"]] for key in EDIT_SCORES]
    rows = []
    for name, scores in (
        ("PaCo SC (edit_consistency template)", sc),
        ("PaCo PF (edit_following template)", pf),
        ("PaCo edit reward sqrt(SC * PF)", np.sqrt(sc * pf)),
        ("CLIP-T against the edit's target text", clip_t),
    ):
        rows.append([name, float(scores.mean())] + [float(pearsonr(scores, o)[0]) for o in oracle])
    return rows


def sheet_path(ctx: DemoContext, arm: EditArm, seed: int) -> Path:
    """Where a run's sources, edits before, edits after and ground truths go (rows)."""
    return ctx.path("world_edit", f"samples_{arm.slug}_seed{seed}.png")


def run(ctx: DemoContext) -> None:
    models = world_models(ctx)
    if models is None:
        return
    _, generator, evaluator, clip = models
    editor = pretrained.editor(ctx.seed, generator)
    world = editor_world(generator)
    train_records = make_edits(world, TRAIN_EDITS, start=TRAIN_START)
    test_records = make_edits(world, HELD_OUT, start=HELD_OUT_START)
    info = read_info(editor, INFO_FILE)
    edits, steps = info["config"]["edits"], info["config"]["steps"]
    print(
        f"EDITING IN MINIATURE: the world's tiny Kontext (pretrained from the generator on "
        f"{edits} edits, {steps} steps, {info['seconds']:.0f} s), "
        f"PaCo-GRPO for {EPOCHS} epochs on {TRAIN_EDITS} train edits, seeds {list(SEEDS)}, "
        f"in {len(ARMS)} arms: {'; '.join(arm.name for arm in ARMS)}. The oracle judges "
        f"{HELD_OUT} held-out edits before and after."
    )
    tasks = {
        (arm, seed): (
            arm,
            str(evaluator),
            str(clip),
            {
                "generator": str(editor),
                "train_records": train_records,
                "test_records": test_records,
                "output_dir": ctx.path("world_edit", f"{arm.slug}_seed{seed}"),
                "seed": ctx.seed * 100 + seed,
                "aggregator": "log_tamed" if arm.paco else "weighted_sum",
                "overrides": {"num_train_epochs": EPOCHS, **RECIPE_OVERRIDES},
                "task": EditTask(world),
            },
        )
        for arm in ARMS
        for seed in SEEDS
    }
    runs = run_in_workers(_run_arm, list(tasks.values()), WORKERS)
    results: dict[EditArm, dict[int, dict]] = {arm: {} for arm in ARMS}
    pairs = [render_edit(world, r) for r in test_records]
    for (arm, seed), run_ in zip(tasks, runs):
        results[arm][seed] = run_
        rows = [
            [s for s, _ in pairs[:12]],
            run_["before"]["images"][:12],
            run_["after"]["images"][:12],
            [t for _, t in pairs[:12]],
        ]
        save_image_atomic(sample_sheet(rows, scale=3), sheet_path(ctx, arm, seed))

    rewards_plot = ctx.path("world_edit", "rewards.png")
    plot_runs(results, rewards_plot, reward_means, "mean train reward")
    images = [(rewards_plot, "Mean train reward per epoch")] + [
        (
            sheet_path(ctx, arm, seed),
            f"{arm.name}, seed {seed}: sources, edits before RL, after RL, ground truth (rows)",
        )
        for arm in ARMS
        for seed in SEEDS
    ]
    ctx.table(
        ReportSection(
            "Experiment 5: editing",
            f"The oracle on {HELD_OUT} held-out edits of 32-px panels (colour, marking, "
            "palette), before -> after PaCo-GRPO (changed: the asked value shows; kept: share "
            "of the other attributes and pips unchanged; success: both; gain: mean per-edit "
            "change; 'both': averaged over the seeds)",
            HEADER,
            reference_rows(test_records, pairs) + experiment_rows(results),
            images,
        )
    )
    before = results[PACO_EDIT][SEEDS[0]]["before"]
    ctx.table(
        ReportSection(
            "Experiment 5: what the editing rewards see",
            f"The rewards of the editor's {HELD_OUT} held-out edits before RL (seed "
            f"{SEEDS[0]}) and their Pearson r with the oracle's readings",
            ["reward", "mean", "r with changed", "r with kept", "r with success"],
            reward_rows(test_records, [s for s, _ in pairs], before, str(evaluator), str(clip)),
        )
    )
    for arm in ARMS:
        gain = pooled_gain(list(results[arm].values()), "success")["mean"]
        print(f"{arm.name}: " + documented(f"world_edit.{arm.slug}", gain))
    ctx.artifacts["world_edit"] = results
