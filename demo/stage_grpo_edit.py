"""Stage: a few editing-RL epochs (PaCo-GRPO) on the tiny FLUX.1-Kontext-shaped pipeline.

Two instructions, each applied to a square and a 2:1 source image under the same prompt
id: references are resized preserving aspect ratio to the training area, each edit keeps
its reference's size, and GRPO groups are (prompt id, image hash) - four groups from two
ids. The reward is the cheap, movable ``panel_colour_agreement`` of the edit, joined by
``edit_consistency`` (sqrt(SC * PF) of the demo's evaluator, source image first) when that
reward is registered and an evaluator was built by an earlier stage.
"""

from __future__ import annotations

from demo.context import DemoContext, print_table
from paco_grpo import rewards as reward_registry
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.testing.flux_kontext import build_tiny_flux_kontext, write_tiny_edit_prompts

EPOCHS = 6
RECIPE = "recipes/grpo_kontext_tiny_cpu.yaml"


def run(ctx: DemoContext) -> None:
    model_dir = build_tiny_flux_kontext(ctx.path("models", "tiny-kontext"), seed=ctx.seed)
    prompts = write_tiny_edit_prompts(ctx.path("grpo_edit", "prompts.parquet"), seed=ctx.seed)
    out = ctx.path("grpo_edit", "run")
    weights = {"panel_colour_agreement": 1.0}
    overrides = {
        "model_name_or_path": str(model_dir),
        "prompt_file": str(prompts),
        "output_dir": str(out),
        "seed": ctx.seed,
        "num_train_epochs": EPOCHS,
        "save_epochs": 0,
        "test.eval_epochs": 3,
        "report_to": [],
        "overwrite_output_dir": True,  # the demo trains its stages afresh in its own folders
    }
    evaluator = ctx.artifacts.get("trained_evaluator") or ctx.artifacts.get("untrained_evaluator")
    if evaluator is not None and "edit_consistency" in reward_registry.REWARDS:
        weights["edit_consistency"] = 1.0
        overrides["reward_kwargs.edit_consistency.model"] = str(evaluator)
    overrides["rewards"] = weights
    overrides["aggregator"] = "log_tamed" if len(weights) > 1 else "weighted_sum"
    # The rewards come from the recipe's reward_kwargs (the edit is one image: the colour
    # reward compares its four quarters, layout 2x2), built by the trainer.
    config = GRPOConfig.from_yaml(RECIPE, overrides)
    trainer = GRPOTrainer(config)
    groups = {trainer.group_key(item) for item in trainer.items}
    sizes = sorted({item.metadata["source_image"].size for item in trainer.items})
    history = trainer.train()

    names = list(weights)
    rows = [
        [row["epoch"], *(row[f"reward/{n}/mean"] for n in names)]
        + [row["train/ratio_first_update"], row["time/epoch"]]
        for row in history
    ]
    print_table(
        f"Editing RL on tiny Kontext ({len(trainer.items)} (prompt, image) pairs, "
        f"{len({i.id for i in trainer.items})} prompt ids -> {len(groups)} groups; "
        f"references at {config.train.resolution}² px area: {sizes} (w, h))",
        ["epoch", *names, "ratio@1st", "seconds"],
        rows,
    )
    evals = [
        [row["epoch"], *(row[f"eval/reward/{n}/mean"] for n in names)]
        for row in history
        if f"eval/reward/{names[0]}/mean" in row
    ]
    print_table(
        f"EMA evaluation (ODE, references at {config.test.resolution}² px area)",
        ["epoch", *names],
        evals,
    )
    print(f"reward curve: {out / 'reward_curve.png'}; LoRA checkpoint: {out / 'checkpoints'}")
    ctx.artifacts["grpo_edit_output"] = out
