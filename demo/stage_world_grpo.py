"""Stage: RL IN MINIATURE. PaCo-GRPO on the world's generator, judged by the world's oracle.

The paper's claims in a world small enough to run here. The pretrained world generator
(stage ``generator``) is trained with PaCo-GRPO in four arms, each with CLIP-T for
panel-prompt alignment (the world's CLIP, :mod:`demo.world_clip`):

1. PaCo-Reward in miniature (``consistency``: every panel pair of a grid under the
   prompt's theme; the evaluator trained on the generator's own grids, stage
   ``world_evaluator``), log-tamed, trained at the resolution it is judged at;
2. CLIP-I (the world's CLIP: mean pairwise panel similarity) instead, the baseline;
3. arm 1 trained at half the resolution (16-px panels; judged at 32-px ones);
4. arm 1 with a plain weighted sum of the rewards instead of log taming.

The oracle, never a reward, judges the grids drawn for held-out prompts before and after
(same initial noise, ODE sampling, EMA weights, the evaluation resolution): consistency and
prompt alignment per prompt, with 95 % intervals, for each seed and averaged over the seeds.
Each experiment compares its arm with arm 1 in a table of the report.
Every run logs the hacking signals too (``hacking/*``; the world CLIP's image tower as its
``feature_model``), as stage ``world_hacking``'s runs do.

Writes ``world_grpo/rewards.png`` (train rewards per epoch), ``world_grpo/reward_ratio.png``
(the consistency / CLIP-T reward ratio per epoch) and ``world_grpo/samples_<arm>_seed<k>.png``
(held-out grids before above, after below).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from data_pipeline.storage import save_image_atomic
from demo import pretrained
from demo.context import DemoContext, ReportSection
from demo.documented import documented
from demo.stage_generator import sample_sheet
from demo.world_clip import save_image_tower
from demo.world_generator import (
    GeneratorConfig,
    generator_world,
    held_out_prompts,
)
from demo.world_rl import paired_gain, pooled_gain, run_call, run_in_workers, run_world_grpo
from paco_reward.atomic_io import save_figure

SEEDS = (0, 1)
EPOCHS = 20
TRAIN_PROMPTS = 32
HELD_OUT = 48
# Train prompts are drawn from this index on: neither the generator's nor the held-out ones.
TRAIN_START = 200_000
# Runs side by side, one torch thread each (the CI machine's cores).
WORKERS = 2
# Recipe fields every run sets on top of recipes/grpo_world_cpu.yaml (tests make runs tiny).
RECIPE_OVERRIDES: dict = {}


@dataclass(frozen=True)
class Arm:
    """One way of training: the consistency reward (``"paco"`` or ``"clip_i"``, each with
    CLIP-T), the aggregator, and the training resolution as a fraction of the judged one."""

    name: str
    slug: str
    consistency: str = "paco"
    aggregator: str = "log_tamed"
    resolution_fraction: float = 1.0


PACO = Arm("PaCo evaluator", "paco")
CLIP_I = Arm("CLIP-I", "clipi", consistency="clip_i")
HALF_RESOLUTION = Arm("PaCo evaluator, half resolution", "paco_half", resolution_fraction=0.5)
WEIGHTED_SUM = Arm("PaCo evaluator, weighted sum", "paco_sum", aggregator="weighted_sum")
ARMS = (PACO, CLIP_I, HALF_RESOLUTION, WEIGHTED_SUM)
# Heading, and the arms it compares (arm 1 first).
EXPERIMENTS = (
    ("Experiments 1-2: the consistency reward", (PACO, CLIP_I)),
    ("Experiment 3: resolution decoupling", (PACO, HALF_RESOLUTION)),
    ("Experiment 4: log taming vs a weighted sum", (PACO, WEIGHTED_SUM)),
)


def feature_model(ctx: DemoContext, clip: Path) -> Path:
    """The world CLIP's image tower as the runs' feature model (their ``hacking/*`` signals),
    saved once in this run's ``models/`` folder for this stage and stage ``world_hacking``."""
    folder = ctx.path("models", "world-clip-image-tower")
    return folder if (folder / "config.json").is_file() else save_image_tower(clip, folder)


def world_rewards(names, evaluator: str, clip: Path) -> dict:
    """Fresh reward instances by name: ``consistency`` (the evaluator), ``clip_i`` and
    ``clip_t`` (the world's CLIP)."""
    from paco_grpo.rewards import CLIPImageReward, CLIPTextReward, ConsistencyReward

    build = {
        "consistency": lambda: ConsistencyReward(evaluator),
        "clip_i": lambda: CLIPImageReward(clip),
        "clip_t": lambda: CLIPTextReward(clip, global_description=True, warn_long_text=False),
    }
    return {name: build[name]() for name in names}


def reward_names(arm: Arm) -> tuple[str, str]:
    """The arm's rewards: its consistency reward and CLIP-T."""
    return ("consistency" if arm.consistency == "paco" else "clip_i", "clip_t")


def reward_ratio(history: list[dict]) -> list[float]:
    """Mean consistency reward / mean CLIP-T reward per epoch."""
    name = "consistency" if "reward/consistency/mean" in history[0] else "clip_i"
    return [row[f"reward/{name}/mean"] / row["reward/clip_t/mean"] for row in history]


def generator_seconds(history: list[dict]) -> float:
    """Seconds a run spent on the generator (sampling and policy updates), without the
    rewards: what the training resolution changes."""
    return sum(row["time/sampling"] + row["time/training"] for row in history)


def plot_runs(results: dict[Arm, dict[int, dict]], path: Path, series, ylabel: str) -> None:
    """One panel per arm, a line per (name, values) of ``series(run)`` and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.5), squeeze=False)
    for ax, (arm, runs) in zip(axes[0], results.items()):
        for seed, run in runs.items():
            epochs = [row["epoch"] for row in run["history"]]
            for label, values in series(run["history"]):
                ax.plot(epochs, values, label=f"{label}, seed {seed}")
        ax.set_title(arm.name, fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def reward_means(history: list[dict]):
    keys = [k for k in history[0] if k.startswith("reward/") and k.endswith("/mean")]
    for key in keys:
        if key != "reward/aggregated/mean":
            yield key.split("/")[1], [row[key] for row in history]


def gain_cell(gain: dict) -> str:
    return f"{gain['mean']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}]"


HEADER = [
    "arm",
    "seed",
    "consistency before",
    "after",
    "gain [95 %]",
    "alignment before",
    "after",
    "gain [95 %]",
    "consistency / CLIP-T reward, last epoch",
    "train s",
    "of which sampling + policy update s",
]


def experiment_rows(arms, results: dict[Arm, dict[int, dict]]) -> list[list]:
    """A row per (arm, seed) and one per arm averaged over the seeds."""
    rows = []
    for arm in arms:
        runs = results[arm]
        for seed, r in runs.items():
            before, after = r["before"], r["after"]
            rows.append(
                [
                    arm.name,
                    seed,
                    before["consistency"],
                    after["consistency"],
                    gain_cell(paired_gain(before, after, "consistency")),
                    before["alignment"],
                    after["alignment"],
                    gain_cell(paired_gain(before, after, "alignment")),
                    reward_ratio(r["history"])[-1],
                    f"{r['seconds']:.0f}",
                    f"{generator_seconds(r['history']):.0f}",
                ]
            )
        pooled = [
            gain_cell(pooled_gain(list(runs.values()), k)) for k in ("consistency", "alignment")
        ]
        seconds = np.mean([r["seconds"] for r in runs.values()])
        own = np.mean([generator_seconds(r["history"]) for r in runs.values()])
        rows.append(
            [
                arm.name,
                "both",
                "",
                "",
                pooled[0],
                "",
                "",
                pooled[1],
                "",
                f"{seconds:.0f}",
                f"{own:.0f}",
            ]
        )
    return rows


def sheet_path(ctx: DemoContext, arm: Arm, seed: int) -> Path:
    """Where a run's held-out grids before (above) and after (below) go."""
    return ctx.path("world_grpo", f"samples_{arm.slug}_seed{seed}.png")


def _run_arm(task: tuple) -> dict:
    """One (arm, seed) run, in a worker process of its own (one torch thread)."""
    arm, evaluator, clip, kwargs = task
    torch.set_num_threads(1)  # the tiny models run fastest single-threaded
    rewards = world_rewards(reward_names(arm), evaluator, clip)
    return run_world_grpo(rewards=rewards, weights=dict.fromkeys(rewards, 1.0), **kwargs)


@dataclass(frozen=True)
class RunInputs:
    """What every (arm, RL seed) run of the RL stages shares: the model folders and the
    prompts."""

    generator: Path
    evaluator: Path
    clip: Path
    features: Path  # the feature model of the hacking signals (feature_model)
    train_records: list = field(hash=False)
    test_records: list = field(hash=False)
    demo_seed: int = 0

    def task(self, arm, seed: int, output_dir: Path, overrides: dict) -> tuple:
        """What a stage's ``_run_arm`` takes for one (arm, RL seed) run: the recipe fields
        ``overrides`` on top of training and testing at the judged resolution with the
        feature model."""
        judged = self.test_records[0]["height"]
        kwargs = {
            "generator": str(self.generator),
            "train_records": self.train_records,
            "test_records": self.test_records,
            "output_dir": output_dir,
            "seed": self.demo_seed * 100 + seed,
            "aggregator": arm.aggregator,
            "overrides": {
                "train.resolution": judged,
                "test.resolution": judged,
                "feature_model": str(self.features),
                **overrides,
            },
        }
        return arm, str(self.evaluator), Path(self.clip), kwargs


def run_task(arm: Arm, seed: int, inputs: RunInputs, output_dir: Path, overrides=None) -> tuple:
    """What :func:`_run_arm` takes for one (arm, RL seed) run; ``overrides``: recipe fields
    on top of the stage's."""
    judged = inputs.test_records[0]["height"]
    return inputs.task(
        arm,
        seed,
        output_dir,
        {
            "num_train_epochs": EPOCHS,
            "train.resolution": int(judged * arm.resolution_fraction),
            **RECIPE_OVERRIDES,
            **(overrides or {}),
        },
    )


def _train_all(ctx: DemoContext, inputs: RunInputs) -> dict[Arm, dict[int, dict]]:
    """Every (arm, seed) run (``{arm: {seed: run}}``), ``WORKERS`` at a time, with its
    before/after sheet and its :func:`~demo.world_rl.run_call` (``run["call"]``)."""
    tasks = {
        (arm, seed): run_task(arm, seed, inputs, ctx.path("world_grpo", f"{arm.slug}_seed{seed}"))
        for arm in ARMS
        for seed in SEEDS
    }
    runs = run_in_workers(_run_arm, list(tasks.values()), WORKERS)
    results: dict[Arm, dict[int, dict]] = {arm: {} for arm in ARMS}
    for ((arm, seed), (_, evaluator, clip, kwargs)), run_ in zip(tasks.items(), runs):
        run_["call"] = run_call(dict.fromkeys(reward_names(arm), 1.0), evaluator, clip, kwargs)
        results[arm][seed] = run_
        before, after = run_["before"]["images"][:12], run_["after"]["images"][:12]
        save_image_atomic(sample_sheet([before, after]), sheet_path(ctx, arm, seed))
    return results


def world_models(ctx: DemoContext) -> tuple[GeneratorConfig, Path, Path, Path] | None:
    """The generator's config and folder, the evaluator of its grids and the world's CLIP,
    from this run, an earlier run in this folder or the cache; None without an evaluator
    (stage ``world_evaluator`` trains it), after saying so."""
    evaluator = ctx.artifacts.get("world_evaluator")
    earlier = ctx.output_dir / "models" / "world-evaluator"
    if evaluator is None and (earlier / "config.json").is_file():
        evaluator = earlier
    if evaluator is None:
        print("No evaluator of the generator's grids (run the world_evaluator stage): skipped.")
        return None
    config = GeneratorConfig(seed=ctx.seed)
    generator = ctx.artifacts.get("world_generator") or pretrained.generator(ctx.seed)
    clip = ctx.artifacts.get("world_clip") or pretrained.world_clip(ctx.seed)
    ctx.artifacts["world_clip"] = clip
    return config, Path(generator), Path(evaluator), Path(clip)


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
        f"RL IN MINIATURE: PaCo-GRPO on the world generator ({EPOCHS} epochs, {TRAIN_PROMPTS} "
        f"train prompts, seeds {list(SEEDS)}) in {len(ARMS)} arms: "
        f"{'; '.join(arm.name for arm in ARMS)}; each with CLIP-T (the world's CLIP). The "
        f"oracle judges {HELD_OUT} held-out prompts before and after."
    )
    results = _train_all(ctx, inputs)

    rewards_plot = ctx.path("world_grpo", "rewards.png")
    plot_runs(results, rewards_plot, reward_means, "mean train reward")
    ratio_plot = ctx.path("world_grpo", "reward_ratio.png")
    plot_runs(results, ratio_plot, lambda h: [("ratio", reward_ratio(h))], "consistency / CLIP-T")
    plots = [
        (rewards_plot, "Mean train reward per epoch"),
        (ratio_plot, "Consistency / CLIP-T reward per epoch"),
    ]
    for i, (heading, arms) in enumerate(EXPERIMENTS):
        # Arm 1's sheets and the plots go with the first experiment only.
        sheets = [
            (
                sheet_path(ctx, arm, seed),
                f"{arm.name}, seed {seed}: held-out grids before (above) and after (below)",
            )
            for arm in (arms if i == 0 else arms[1:])
            for seed in SEEDS
        ]
        ctx.table(
            ReportSection(
                heading,
                f"The oracle on {HELD_OUT} held-out prompts at {test_records[0]['height']} px, "
                "before -> after PaCo-GRPO (gain: mean per-prompt change; 'both': averaged "
                "over the seeds; train s: training wall-clock)",
                HEADER,
                experiment_rows(arms, results),
                (plots if i == 0 else []) + sheets,
            )
        )
    for arm in ARMS:
        gain = pooled_gain(list(results[arm].values()), "consistency")["mean"]
        print(f"{arm.name}: " + documented(f"world_grpo.{arm.slug}", gain))
    print(
        f"Reward curves: {rewards_plot}, {ratio_plot}; samples: {ctx.path('world_grpo')}/samples_*.png"
    )
    ctx.artifacts["world_grpo"] = results
