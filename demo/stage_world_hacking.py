"""Stage: REWARD HACKING IN MINIATURE. The consistency reward gamed, and the defences, judged
by the world's oracle.

A consistency reward pays most for one picture in every panel. In the world that is a
measurable hack: the oracle reads each panel's pip count, which must move on from panel to
panel (its ``diversity``, :mod:`demo.world_judge`) and is part of prompt alignment. The
pretrained world generator (stage ``generator``) is trained with the world evaluator's
consistency (the proxy, stage ``world_evaluator``) in four arms of the same budget:

1. the proxy alone, a plain sum (nothing resists the hack);
2. the proxy with CLIP-T, log-tamed (the paper's aggregation);
3. the proxy alone with a KL to the base model on every sample (``beta``);
4. the proxy alone with GARDO's three pieces: the KL gated by the proxy's rank against two
   auxiliary rewards (CLIP-T and CLIP-I, weight 0: scored, never trained), the resettable
   reference adapter and the diversity-aware advantage on the world CLIP's image features.

Arms 3 and 4 take GARDO's released settings (beta 0.04, kappa 0.1, resets at a KL of 3e-4
or every 15 epochs; ``recipes/grpo_flux_t2is_gardo.yaml``); nothing here was tuned for a
method to win. Every arm logs the hacking signals (``hacking/*`` in its metrics) with the
same feature model. The oracle judges the held-out prompts' grids before and after, as in
stage ``world_grpo``: consistency, alignment and diversity per prompt, per RL seed and
averaged over the seeds, with 95 % intervals over prompts.

Arm 2 is stage ``world_grpo``'s arm 1: when that stage ran first in this demo run, its runs
are this arm's RL seeds 0 and 1 (the same runs, :func:`earlier_run`), not trained again.

Writes ``world_hacking/proxy.png`` (the proxy's train mean per epoch),
``world_hacking/diversity.png`` (the in-group feature diversity per epoch) and
``world_hacking/samples_<arm>_seed<k>.png`` (held-out grids before above, after below).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from data_pipeline.storage import save_image_atomic
from demo.context import DemoContext, ReportSection
from demo.documented import documented
from demo.stage_generator import sample_sheet

# The train and held-out prompts, the feature model and the run inputs are stage world_grpo's.
from demo.stage_world_grpo import (
    HELD_OUT,
    TRAIN_PROMPTS,
    TRAIN_START,
    RunInputs,
    feature_model,
    gain_cell,
    plot_runs,
    world_models,
    world_rewards,
)
from demo.world_generator import generator_world, held_out_prompts
from demo.world_judge import SCORES
from demo.world_rl import paired_gain, pooled_gain, run_call, run_in_workers, run_world_grpo

SEEDS = (0, 1, 2)
EPOCHS = 20
WORKERS = 2
# GARDO's released settings (its configs' beta lies in 0.01-0.07; recipes/grpo_flux_t2is_gardo.yaml).
BETA = 0.04
GARDO = {
    "beta": BETA,
    "kl_reference": "adapter",
    "reference_reset_kl": 3.0e-4,
    "reference_reset_epochs": 15,
    "kl_gate_rewards": ["clip_t", "clip_i"],
    "kl_gate_kappa": 0.1,
    "diversity_advantage": True,
}
# Recipe fields every run sets on top of recipes/grpo_world_cpu.yaml (tests make runs tiny).
RECIPE_OVERRIDES: dict = {}


@dataclass(frozen=True)
class Defence:
    """One arm: its rewards (name -> weight; ``consistency`` is the proxy), aggregator and
    recipe fields."""

    name: str
    slug: str
    rewards: dict = field(hash=False)
    aggregator: str = "weighted_sum"
    recipe: dict = field(default_factory=dict, hash=False)


ALONE = Defence("proxy alone", "alone", {"consistency": 1.0})
LOG_TAMED = Defence(
    "proxy + CLIP-T, log-tamed", "log_tamed", {"consistency": 1.0, "clip_t": 1.0}, "log_tamed"
)
KL_ALL = Defence("proxy + KL on every sample", "kl", {"consistency": 1.0}, recipe={"beta": BETA})
GARDO_ARM = Defence(
    "proxy + GARDO", "gardo", {"consistency": 1.0, "clip_t": 0.0, "clip_i": 0.0}, recipe=GARDO
)
ARMS = (ALONE, LOG_TAMED, KL_ALL, GARDO_ARM)

HEADER = [
    "arm",
    "seed",
    "consistency gain [95 %]",
    "alignment gain [95 %]",
    "diversity gain [95 %]",
    "proxy reward, first -> last epoch",
    "feature diversity, first -> last epoch",
    "train s",
]


def first_last(history: list[dict], key: str) -> str:
    return f"{history[0][key]:.3f} -> {history[-1][key]:.3f}"


def table_rows(results: dict[Defence, dict[int, dict]]) -> list[list]:
    """A row per (arm, seed) and one per arm over the seeds (``"all"``)."""
    rows = []
    for arm, runs in results.items():
        for seed, run in runs.items():
            before, after, history = run["before"], run["after"], run["history"]
            rows.append(
                [
                    arm.name,
                    seed,
                    *(gain_cell(paired_gain(before, after, key)) for key in SCORES),
                    first_last(history, "reward/consistency/mean"),
                    first_last(history, "hacking/diversity/mean"),
                    f"{run['seconds']:.0f}",
                ]
            )
        pooled = [gain_cell(pooled_gain(list(runs.values()), key)) for key in SCORES]
        seconds = np.mean([run["seconds"] for run in runs.values()])
        rows.append([arm.name, "all", *pooled, "", "", f"{seconds:.0f}"])
    return rows


def sheet_path(ctx: DemoContext, arm: Defence, seed: int) -> Path:
    return ctx.path("world_hacking", f"samples_{arm.slug}_seed{seed}.png")


def _run_arm(task: tuple) -> dict:
    """One (arm, seed) run, in a worker process of its own (one torch thread)."""
    arm, evaluator, clip, kwargs = task
    torch.set_num_threads(1)
    rewards = world_rewards(arm.rewards, evaluator, clip)
    return run_world_grpo(rewards=rewards, weights=arm.rewards, **kwargs)


def run_task(arm: Defence, seed: int, inputs: RunInputs, output_dir: Path, overrides=None) -> tuple:
    """What :func:`_run_arm` takes for one (arm, RL seed) run (trained at the resolution it
    is judged at); ``overrides``: recipe fields on top of the arm's."""
    return inputs.task(
        arm,
        seed,
        output_dir,
        {"num_train_epochs": EPOCHS, **arm.recipe, **RECIPE_OVERRIDES, **(overrides or {})},
    )


def earlier_run(ctx: DemoContext, task: tuple) -> dict | None:
    """Stage ``world_grpo``'s run (of this demo run) that is the same run as ``task``, if one
    is: its arm 1 is this stage's log-tamed arm (same rewards, recipe, prompts and seed)."""
    arm, evaluator, clip, kwargs = task
    call = run_call(arm.rewards, evaluator, clip, kwargs)
    for runs in ctx.artifacts.get("world_grpo", {}).values():
        for run in runs.values():
            if run.get("call") == call:
                return run
    return None


def _train_all(ctx: DemoContext, inputs: RunInputs) -> dict[Defence, dict[int, dict]]:
    """Every (arm, seed) run, ``WORKERS`` at a time (but those stage ``world_grpo`` already
    ran: :func:`earlier_run`), with its before/after sheet."""
    tasks = {
        (arm, seed): run_task(
            arm, seed, inputs, ctx.path("world_hacking", f"{arm.slug}_seed{seed}")
        )
        for arm in ARMS
        for seed in SEEDS
    }
    done = {key: run for key, task in tasks.items() if (run := earlier_run(ctx, task))}
    if done:
        print(
            "Taken from stage world_grpo (the same runs): "
            + ", ".join(f"{arm.name} seed {seed}" for arm, seed in done)
        )
    todo = [key for key in tasks if key not in done]
    runs = dict(zip(todo, run_in_workers(_run_arm, [tasks[key] for key in todo], WORKERS)))
    results: dict[Defence, dict[int, dict]] = {arm: {} for arm in ARMS}
    for arm, seed in tasks:
        run = results[arm][seed] = done.get((arm, seed)) or runs[(arm, seed)]
        before, after = run["before"]["images"][:12], run["after"]["images"][:12]
        save_image_atomic(sample_sheet([before, after]), sheet_path(ctx, arm, seed))
    return results


def run(ctx: DemoContext) -> None:
    models = world_models(ctx)
    if models is None:
        return
    config, generator, evaluator, clip = models
    test_records = held_out_prompts(config, HELD_OUT)
    inputs = RunInputs(
        generator=generator,
        evaluator=evaluator,
        clip=clip,
        features=feature_model(ctx, clip),
        train_records=generator_world(config).make_prompts(TRAIN_PROMPTS, start=TRAIN_START),
        test_records=test_records,
        demo_seed=ctx.seed,
    )
    print(
        f"REWARD HACKING IN MINIATURE: the world evaluator's consistency as the proxy, "
        f"{EPOCHS} epochs, RL seeds {list(SEEDS)}, in {len(ARMS)} arms: "
        f"{'; '.join(arm.name for arm in ARMS)}. The oracle judges {HELD_OUT} held-out "
        "prompts before and after."
    )
    results = _train_all(ctx, inputs)

    proxy_plot = ctx.path("world_hacking", "proxy.png")
    plot_runs(
        results,
        proxy_plot,
        lambda h: [("proxy", [row["reward/consistency/mean"] for row in h])],
        "mean proxy reward",
    )
    diversity_plot = ctx.path("world_hacking", "diversity.png")
    plot_runs(
        results,
        diversity_plot,
        lambda h: [("features", [row["hacking/diversity/mean"] for row in h])],
        "in-group feature diversity",
    )
    sheets = [
        (sheet_path(ctx, arm, seed), f"{arm.name}, seed {seed}: before (above), after (below)")
        for arm in ARMS
        for seed in SEEDS[:1]
    ]
    ctx.table(
        ReportSection(
            "Experiment 6: reward hacking",
            f"The oracle on {HELD_OUT} held-out prompts, before -> after training on the "
            "world evaluator's consistency (gain: mean per-prompt change; 'all': averaged over "
            "the RL seeds; diversity: the panel pairs whose pip counts differ)",
            HEADER,
            table_rows(results),
            [
                (proxy_plot, "Mean proxy reward per epoch"),
                (diversity_plot, "In-group feature diversity per epoch"),
                *sheets,
            ],
        )
    )
    for arm in ARMS:
        gain = pooled_gain(list(results[arm].values()), "alignment")["mean"]
        print(f"{arm.name}: " + documented(f"world_hacking.{arm.slug}", gain))
    ctx.artifacts["world_hacking"] = results
