"""Stage: a few PaCo-GRPO epochs on the tiny FLUX, rewarded by the demo's evaluator.

The consistency reward is the evaluator from the earlier stages (the trained one when
the SFT stage ran, else the untrained one); the cheap panel-colour-agreement reward
joins it, and the two are aggregated with log taming as in the paper.
"""

from __future__ import annotations

from demo.context import DemoContext, print_table
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.rewards import ConsistencyReward, PanelColourAgreementReward
from paco_reward.testing.flux import build_tiny_flux

EPOCHS = 8


def run(ctx: DemoContext) -> None:
    evaluator = ctx.artifacts.get("trained_evaluator") or ctx.artifacts["untrained_evaluator"]
    flux_dir = build_tiny_flux(ctx.path("models", "tiny-flux"), seed=ctx.seed)
    out = ctx.path("grpo", "run")
    overrides = {
        "model_name_or_path": str(flux_dir),
        "output_dir": str(out),
        "seed": ctx.seed,
        "max_epochs": EPOCHS,
        "group_size": 8,
        "rewards": {"consistency": 1.0, "panel_colour_agreement": 1.0},
        "aggregator": "log_tamed",
        "log_taming_threshold": 0.2,
        "save_every": 0,
        "test.every": 3,
        "test.num_prompts": 4,
    }
    config = GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml", overrides)
    rewards = {
        "consistency": ConsistencyReward(str(evaluator)),
        "panel_colour_agreement": PanelColourAgreementReward(),
    }
    history = GRPOTrainer(config, rewards=rewards).train()

    rows = [
        [
            row["epoch"],
            row["reward/consistency/mean"],
            row["reward/panel_colour_agreement/mean"],
            "log" if row.get("reward/consistency/log_tamed") else "raw",
            row["train/ratio_first_update"],
            row["time/epoch"],
        ]
        for row in history
    ]
    print_table(
        f"PaCo-GRPO on tiny FLUX ({config.prompts_per_epoch} prompts x {config.group_size} images "
        f"per epoch, {config.train.resolution}² train / {config.test.resolution}² eval), evaluator: "
        f"{evaluator}",
        ["epoch", "consistency", "colour agreement", "consistency taming", "ratio@1st", "seconds"],
        rows,
    )
    evals = [
        [
            row["epoch"],
            row["eval/reward/consistency/mean"],
            row["eval/reward/panel_colour_agreement/mean"],
        ]
        for row in history
        if "eval/reward/consistency/mean" in row
    ]
    print_table(
        "EMA evaluation (ODE sampling at test resolution)",
        ["epoch", "consistency", "colour agreement"],
        evals,
    )
    print(f"reward curve: {out / 'reward_curve.png'}; LoRA checkpoint: {out / 'checkpoints'}")
    ctx.artifacts["grpo_output"] = out
