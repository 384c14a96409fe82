"""Stage: RL IN MINIATURE. PaCo-GRPO on the world's generator, judged by the world's oracle.

The paper's claim in a world small enough to run here. The pretrained world generator
(stage ``generator``) is trained with PaCo-GRPO and one of two consistency rewards, each
with CLIP-T for panel-prompt alignment (the world's CLIP, :mod:`demo.world_clip`) and log
taming:

1. PaCo-Reward in miniature (``consistency``: every panel pair of a grid under the
   prompt's theme), the evaluator trained on the generator's own grids (stage
   ``world_evaluator``), and
2. CLIP-I (the world's CLIP: mean pairwise panel similarity), the baseline.

The oracle, never a reward, judges the grids drawn for held-out prompts before and after
(same initial noise, ODE sampling, EMA weights): consistency and prompt alignment per
prompt, with 95 % intervals, for each seed and averaged over the seeds.

Writes ``world_grpo/rewards.png`` (train rewards per epoch) and
``world_grpo/samples_<reward>_seed<k>.png`` (held-out grids before above, after below); sets
``ctx.artifacts["world_grpo"]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from data_pipeline.storage import save_image_atomic
from demo.context import DemoContext, cache_dir, print_table
from demo.stage_generator import sample_sheet
from demo.world_clip import WorldClipConfig, pretrain_world_clip
from demo.world_generator import (
    GeneratorConfig,
    generator_world,
    held_out_prompts,
    pretrain_world_generator,
)
from demo.world_rl import paired_gain, run_world_grpo
from paco_reward.atomic_io import save_figure

SEEDS = (0, 1)
EPOCHS = 40
TRAIN_PROMPTS = 32
HELD_OUT = 48
# Train prompts are drawn from this index on: neither the generator's nor the held-out ones.
TRAIN_START = 200_000


def plot_rewards(results: dict[str, dict[int, dict]], path: Path) -> None:
    """Mean train reward per epoch: one panel per consistency reward, a line per reward and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5), squeeze=False)
    for ax, (name, runs) in zip(axes[0], results.items()):
        for seed, run in runs.items():
            epochs = [row["epoch"] for row in run["history"]]
            keys = [k for k in run["history"][0] if k.startswith("reward/") and k.endswith("/mean")]
            for key in keys:
                if key != "reward/aggregated/mean":
                    values = [row[key] for row in run["history"]]
                    ax.plot(epochs, values, label=f"{key.split('/')[1]}, seed {seed}")
        ax.set_title(f"consistency reward: {name}")
        ax.set_xlabel("epoch")
        ax.set_ylabel("mean train reward")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def gain_cell(gain: dict) -> str:
    return f"{gain['mean']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}]"


def pooled_gain(runs: list[dict], key: str) -> dict:
    """The per-prompt change of ``key`` averaged over runs (seeds), with its 95 % interval."""
    diffs = np.mean(
        [
            [a[key] - b[key] for a, b in zip(r["after"]["per_grid"], r["before"]["per_grid"])]
            for r in runs
        ],
        axis=0,
    )
    se = float(diffs.std(ddof=1) / np.sqrt(len(diffs)))
    mean = float(diffs.mean())
    return {"mean": mean, "se": se, "low": mean - 1.96 * se, "high": mean + 1.96 * se}


def reward_sets(evaluator: str, clip: Path) -> dict[str, dict]:
    """Experiment 1 (the trained evaluator) and experiment 2 (CLIP-I) as consistency
    rewards, each with CLIP-T for panel-prompt alignment: ``{name: {reward: factory}}``."""
    from paco_grpo.rewards import CLIPImageReward, CLIPTextReward, ConsistencyReward

    def clip_t():
        return CLIPTextReward(clip, global_description=True, warn_long_text=False)

    return {
        "PaCo evaluator": {"consistency": lambda: ConsistencyReward(evaluator), "clip_t": clip_t},
        "CLIP-I": {"clip_i": lambda: CLIPImageReward(clip), "clip_t": clip_t},
    }


def _train_all(ctx, generator, evaluator, clip, train_records, test_records) -> dict:
    """Every (reward set, seed) run (``{name: {seed: run}}``), with its before/after sheet."""
    results: dict[str, dict[int, dict]] = {}
    for name, factories in reward_sets(str(evaluator), clip).items():
        results[name] = {}
        for seed in SEEDS:
            rewards = {reward: make() for reward, make in factories.items()}
            slug = name.split()[0].lower().replace("-", "")
            run_ = run_world_grpo(
                generator,
                rewards,
                dict.fromkeys(rewards, 1.0),
                train_records,
                test_records,
                ctx.path("world_grpo", f"{slug}_seed{seed}"),
                seed=ctx.seed * 100 + seed,
                overrides={"num_train_epochs": EPOCHS},
            )
            results[name][seed] = run_
            before, after = run_["before"]["images"][:12], run_["after"]["images"][:12]
            save_image_atomic(
                sample_sheet([before, after]),
                ctx.path("world_grpo", f"samples_{slug}_seed{seed}.png"),
            )
    return results


def run(ctx: DemoContext) -> None:
    # The evaluator of the generator's grids, from this run or an earlier one in this folder.
    evaluator = ctx.artifacts.get("world_evaluator")
    earlier = ctx.output_dir / "models" / "world-evaluator"
    if evaluator is None and (earlier / "config.json").is_file():
        evaluator = earlier
    if evaluator is None:
        print("No evaluator of the generator's grids (run the world_evaluator stage): skipped.")
        return
    config = GeneratorConfig(seed=ctx.seed)
    generator = ctx.artifacts.get("world_generator") or pretrain_world_generator(
        cache_dir() / "generator" / config.key(), config
    )
    clip_config = WorldClipConfig(seed=ctx.seed)
    clip = pretrain_world_clip(cache_dir() / "world_clip" / clip_config.key(), clip_config)
    train_records = generator_world(config).make_prompts(TRAIN_PROMPTS, start=TRAIN_START)
    test_records = held_out_prompts(config, HELD_OUT)
    print(
        f"RL IN MINIATURE: PaCo-GRPO on the world generator ({EPOCHS} epochs, {TRAIN_PROMPTS} "
        "train prompts), consistency rewarded by the trained evaluator (experiment 1) or by "
        "CLIP-I (experiment 2), each with CLIP-T (the world's CLIP), log-tamed; the oracle "
        f"judges {HELD_OUT} held-out prompts before and after."
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny models run fastest single-threaded on a shared machine
    try:
        results = _train_all(ctx, generator, evaluator, clip, train_records, test_records)
    finally:
        torch.set_num_threads(threads)

    rows = []
    for name, runs in results.items():
        for seed, r in runs.items():
            rows.append(
                [
                    name,
                    seed,
                    r["before"]["consistency"],
                    r["after"]["consistency"],
                    gain_cell(paired_gain(r["before"], r["after"], "consistency")),
                    r["before"]["alignment"],
                    r["after"]["alignment"],
                    gain_cell(paired_gain(r["before"], r["after"], "alignment")),
                    f"{r['before']['unreadable_panels']} -> {r['after']['unreadable_panels']}",
                    f"{r['seconds']:.0f}",
                ]
            )
        rows.append(
            [
                name,
                "both",
                "",
                "",
                gain_cell(pooled_gain(list(runs.values()), "consistency")),
                "",
                "",
                gain_cell(pooled_gain(list(runs.values()), "alignment")),
                "",
                "",
            ]
        )
    header = [
        "consistency reward",
        "seed",
        "consistency before",
        "after",
        "gain [95 %]",
        "alignment before",
        "after",
        "gain [95 %]",
        "unreadable panels",
        "train s",
    ]
    title = (
        f"Experiments 1-2: the oracle on {HELD_OUT} held-out prompts, before -> after PaCo-GRPO "
        "(gain: mean per-prompt change; 'both': averaged over the seeds)"
    )
    print_table(title, header, rows)
    plot = ctx.path("world_grpo", "rewards.png")
    plot_rewards(results, plot)
    print(
        f"Reward curves: {plot}; samples (before above, after below): {ctx.path('world_grpo')}/samples_*.png"
    )
    ctx.artifacts["world_grpo"] = {
        "title": title,
        "header": header,
        "rows": rows,
        "plot": plot,
        "samples": sorted(ctx.path("world_grpo").glob("samples_*.png")),
    }
