"""One run of the RL experiments, alone and with recipe changes: what the ``world_grpo``
stage runs for each (arm, RL seed), on the same models.

The stage's numbers rest on its recipe (epochs, learning rate) as much as on its rewards
(docs/miniature-study.md, "What the recipe does"). This runs one arm for one RL seed with
the stage's settings and ``--overrides`` on top (fields of ``recipes/grpo_world_cpu.yaml``,
dotted for nested ones), and prints what the stage's table prints for it: the oracle's
consistency and alignment of the held-out prompts' grids before and after, the gain with its
95 % interval, and the mean train rewards per epoch. Without overrides it repeats the stage's
run for that arm and seed.

    python -m demo.rl_arm --demo_output demo_output --arm paco --rl_seed 1 \\
        --overrides "{num_train_epochs: 30, learning_rate: 1.0e-3}" --output_dir rl_arm

Arms: ``paco`` (arm 1), ``clipi`` (2), ``paco_half`` (3), ``paco_sum`` (4) of ``world_grpo``;
``alone``, ``log_tamed``, ``kl``, ``gardo`` of ``world_hacking`` (a longer hacking sweep is
this, once per arm and RL seed, with ``--overrides "{num_train_epochs: 40}"``). The evaluator is
the world_evaluator stage's in ``--demo_output``; the generator and the world's CLIP come from
the demo's cache for ``--seed`` (pretrained first if missing) unless named. Writes
``<output_dir>/before_after.png`` (held-out grids before above, after below) and
``<output_dir>/result.json``. Runs in a source checkout (``demo`` is not an installed package).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from demo.context import print_table
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError, PathNotFoundError


@dataclass
class RLArmArguments:
    """One run of an RL experiment's arm, with recipe overrides."""

    arm: str = config_field(
        "paco",
        help="world_grpo's paco (arm 1), clipi (2), paco_half (3), paco_sum (4); world_hacking's "
        "alone, log_tamed, kl, gardo.",
    )
    rl_seed: int = config_field(0, help="The RL seed (the stage runs 0 and 1).")
    overrides: dict = config_field(
        dict, help='Recipe fields on top of the stage\'s, e.g. "{num_train_epochs: 30}".'
    )
    output_dir: str = config_field("rl_arm_output", help="Where the run's files go.")
    demo_output: str = config_field(
        "demo_output", help="The demo's output folder (its models/world-evaluator)."
    )
    seed: int = config_field(0, help="The demo's seed (prompts, cached generator and CLIP).")
    train_prompts: int | None = config_field(None, help="Train prompts (default: the stage's).")
    held_out: int | None = config_field(None, help="Held-out prompts (default: the stage's).")
    evaluator: str | None = config_field(None, help="An evaluator folder instead.")
    generator: str | None = config_field(None, help="A world generator folder instead.")
    clip: str | None = config_field(None, help="A world CLIP folder instead.")


def run_arm(args: RLArmArguments) -> dict:
    """The run (:func:`demo.world_rl.run_world_grpo`'s result) with ``"gains"`` added:
    ``{"consistency", "alignment", "diversity"}``, each :func:`demo.world_rl.paired_gain`."""
    import demo.stage_world_grpo as stage
    import demo.stage_world_hacking as hacking
    from demo import pretrained
    from demo.world_clip import save_image_tower
    from demo.world_generator import GeneratorConfig, generator_world, held_out_prompts
    from demo.world_judge import SCORES
    from demo.world_rl import paired_gain

    arms = {arm.slug: arm for arm in (*stage.ARMS, *hacking.ARMS)}
    if args.arm not in arms:
        raise ConfigError(f"unknown arm {args.arm!r}; the arms are {list(arms)}.")
    arm = arms[args.arm]
    evaluator = Path(args.evaluator or Path(args.demo_output) / "models" / "world-evaluator")
    if not (evaluator / "config.json").is_file():
        raise PathNotFoundError(
            f"no evaluator in {evaluator} (run the demo's world_evaluator stage, or give "
            "--evaluator)."
        )
    config = GeneratorConfig(seed=args.seed)
    generator = args.generator or str(pretrained.generator(args.seed))
    clip = args.clip or str(pretrained.world_clip(args.seed))
    train_records = generator_world(config).make_prompts(
        args.train_prompts or stage.TRAIN_PROMPTS, start=stage.TRAIN_START
    )
    test_records = held_out_prompts(config, args.held_out or stage.HELD_OUT)
    output_dir = Path(args.output_dir)
    inputs = stage.RunInputs(
        generator=Path(generator),
        evaluator=evaluator,
        clip=Path(clip),
        features=save_image_tower(clip, output_dir / "features"),
        train_records=train_records,
        test_records=test_records,
        demo_seed=args.seed,
    )
    module = hacking if arm in hacking.ARMS else stage
    run = module._run_arm(module.run_task(arm, args.rl_seed, inputs, output_dir, args.overrides))
    run["gains"] = {key: paired_gain(run["before"], run["after"], key) for key in SCORES}
    return run


def run(args: RLArmArguments) -> int:
    from data_pipeline.storage import save_image_atomic
    from demo.stage_generator import sample_sheet
    from demo.stage_world_grpo import gain_cell, reward_means
    from demo.world_judge import SCORES

    result = run_arm(args)
    before, after = result["before"], result["after"]
    means = dict(reward_means(result["history"]))
    print_table(
        f"Mean train rewards per epoch (arm {args.arm}, RL seed {args.rl_seed})",
        ["epoch", *means],
        [
            [row["epoch"], *(values[i] for values in means.values())]
            for i, row in enumerate(result["history"])
        ],
    )
    print_table(
        f"The oracle on {len(before['per_item'])} held-out prompts, before -> after "
        f"({result['seconds']:.0f}s of training)",
        ["", "before", "after", "gain [95 %]"],
        [[key, before[key], after[key], gain_cell(result["gains"][key])] for key in SCORES],
    )
    output_dir = Path(args.output_dir)
    sheet = output_dir / "before_after.png"
    save_image_atomic(sample_sheet([before["images"][:12], after["images"][:12]]), sheet)
    summary = {
        "arm": args.arm,
        "rl_seed": args.rl_seed,
        "overrides": args.overrides,
        "seconds": result["seconds"],
        **{f"{key}_before": before[key] for key in SCORES},
        **{f"{key}_after": after[key] for key in SCORES},
        "gains": result["gains"],
    }
    (output_dir / "result.json").write_text(json.dumps(summary, indent=2))
    print(f"Before (above) and after (below): {sheet}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m demo.rl_arm``; returns the exit status."""
    command = Command("rl-arm", RLArmArguments, run, __doc__.splitlines()[0])
    return run_cli("python -m demo.rl_arm", __doc__.split("\n\n")[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
