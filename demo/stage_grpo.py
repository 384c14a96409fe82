"""Stage: a few PaCo-GRPO epochs on the tiny FLUX with the paper's two rewards.

``consistency`` is the demo's evaluator (the trained one when the SFT stage ran, else the
untrained one) over every panel pair of each 2x2 grid; ``clip_t`` is a tiny offline CLIP
comparing each panel with its own panel description. They are aggregated with log
taming (delta = 0.2) as in the paper, and scored asynchronously: each sampling batch is
rewarded while the next one is sampled. The stage prints the per-epoch table (with the
share of each step spent waiting on rewards) and plots the consistency / CLIP-T reward
ratio over epochs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from demo.context import DemoContext, print_table
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.rewards import CLIPTextReward, ConsistencyReward
from paco_grpo.testing.flux import build_tiny_flux
from paco_reward.atomic_io import save_figure
from paco_reward.testing.clip import build_tiny_clip

EPOCHS = 8


def plot_reward_ratio(history: list[dict], path: Path) -> None:
    """consistency / CLIP-T mean reward per epoch (train, and eval where present) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for prefix, marker in (("", "."), ("eval/", "o")):
        points = [
            (row["epoch"], row[f"{prefix}reward/consistency/mean"] / row[f"{prefix}reward/clip_t/mean"])
            for row in history
            if f"{prefix}reward/consistency/mean" in row
        ]  # fmt: skip
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker=marker, label=f"{prefix or 'train/'}consistency / clip_t")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean reward ratio")
    ax.set_title("PaCo-GRPO: consistency / CLIP-T reward ratio")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def run(ctx: DemoContext) -> None:
    evaluator = ctx.artifacts.get("trained_evaluator") or ctx.artifacts["untrained_evaluator"]
    clip_dir = ctx.artifacts.get("tiny_clip") or build_tiny_clip(
        ctx.path("models", "tiny-clip"), seed=ctx.seed
    )
    flux_dir = build_tiny_flux(ctx.path("models", "tiny-flux"), seed=ctx.seed)
    out = ctx.path("grpo", "run")
    overrides = {
        "model_name_or_path": str(flux_dir),
        "output_dir": str(out),
        "seed": ctx.seed,
        "num_train_epochs": EPOCHS,
        "num_generations": 8,
        "sample_batch_size": 4,
        "rewards": {"consistency": 1.0, "clip_t": 1.0},
        "aggregator": "log_tamed",
        "log_taming_threshold": 0.2,
        "async_rewards": True,
        "save_epochs": 0,
        "test.eval_epochs": 4,
        "test.num_prompts": 4,
        "overwrite_output_dir": True,  # the demo trains its stages afresh in its own folders
    }
    config = GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml", overrides)
    rewards = {
        "consistency": ConsistencyReward(str(evaluator)),
        "clip_t": CLIPTextReward(clip_dir),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny models run fastest single-threaded on a shared machine
    try:
        history = GRPOTrainer(config, rewards=rewards).train()
    finally:
        torch.set_num_threads(threads)

    rows = [
        [
            row["epoch"],
            row["reward/consistency/mean"],
            row["reward/clip_t/mean"],
            row["reward/consistency/mean"] / row["reward/clip_t/mean"],
            "log" if row.get("reward/consistency/log_tamed") else "raw",
            "log" if row.get("reward/clip_t/log_tamed") else "raw",
            row["reward/num_failed"],
            f"{100 * row['time/reward_share']:.1f}%",
            row["time/epoch"],
        ]
        for row in history
    ]
    print_table(
        f"PaCo-GRPO on tiny FLUX ({config.prompts_per_epoch} prompts x {config.num_generations} images "
        f"per epoch, {config.train.resolution}² train / {config.test.resolution}² eval), "
        f"consistency: {evaluator}, clip_t: tiny CLIP, log taming delta "
        f"{config.log_taming_threshold}, rewards overlapped with sampling",
        [
            "epoch",
            "consistency",
            "clip_t",
            "ratio",
            "cons. taming",
            "clip_t taming",
            "NaN",
            "reward wait",
            "seconds",
        ],
        rows,
    )
    evals = [
        [row["epoch"], row["eval/reward/consistency/mean"], row["eval/reward/clip_t/mean"]]
        for row in history
        if "eval/reward/consistency/mean" in row
    ]
    print_table(
        "EMA evaluation (ODE sampling at test resolution)",
        ["epoch", "consistency", "clip_t"],
        evals,
    )
    ratio_png = out / "reward_ratio.png"
    plot_reward_ratio(history, ratio_png)
    print(
        f"reward ratio plot: {ratio_png}; reward curve: {out / 'reward_curve.png'}; "
        f"LoRA checkpoint: {out / 'checkpoints'}"
    )
    ctx.artifacts["grpo_output"] = out
