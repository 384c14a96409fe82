"""Which reward reads the world generator's grids: the Pearson r of each reward of the RL
experiments with the oracle's consistency and alignment of the same grids.

The generator draws one grid for each of ``--grids`` prompts that no stage trains or judges
on; the oracle (:mod:`demo.world_judge`) reads every panel; each reward scores the grids as
the GRPO trainer would. The ``world_evaluator`` stage exists because of what this shows: the
``train`` stage's evaluator, trained on the world's crisp 64-px renders, does not judge the
generator's blurry 32-px panels, and the one fine-tuned on the generator's own grids does
(docs/miniature-study.md, "The world evaluator").

    python -m demo.reward_vs_oracle --demo_output demo_output --grids 128

The evaluators come from a demo output folder (``models/tiny-trained`` from the train stage,
``models/world-evaluator`` from the world_evaluator stage; one that is missing is left out),
the generator and the world's CLIP from the demo's cache for ``--seed`` (pretrained first if
missing, as the demo does: about 15 minutes on 2 cores) unless ``--generator`` / ``--clip``
name folders. Runs in a source checkout (``demo`` is not an installed package).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from demo.context import print_table
from paco_reward.command_line import Command, config_field, run_cli

# Prompts from this index on: neither the generator's, the held-out, the RL train prompts
# (200,000 on) nor the world evaluator's (400,000 on).
START = 300_000
BATCH = 16
EVALUATORS = {
    "train stage's evaluator (renders)": ("models", "tiny-trained"),
    "world evaluator (generator's grids)": ("models", "world-evaluator"),
}


@dataclass
class RewardOracleArguments:
    """Pearson r of the RL rewards with the oracle on the world generator's grids."""

    demo_output: str = config_field(
        "demo_output", help="The demo's output folder whose evaluators are compared."
    )
    grids: int = config_field(128, help="Grids to draw, one per prompt.")
    seed: int = config_field(0, help="The demo's seed (which cached generator and CLIP).")
    generator: str | None = config_field(
        None, help="A world generator folder (FluxPipeline) instead of the cached one."
    )
    clip: str | None = config_field(None, help="A world CLIP folder instead of the cached one.")
    json: str | None = config_field(None, help="Also write the results to this JSON file.")


def rewards_of(demo_output: Path, clip: str) -> dict:
    """The rewards to compare: each evaluator ``demo_output`` holds (PaCo's consistency
    under the prompt's theme), CLIP-I and CLIP-T of the world's CLIP."""
    from paco_grpo.rewards import CLIPImageReward, CLIPTextReward, ConsistencyReward

    rewards = {
        name: ConsistencyReward(str(demo_output.joinpath(*parts)))
        for name, parts in EVALUATORS.items()
        if (demo_output.joinpath(*parts) / "config.json").is_file()
    }
    rewards["CLIP-I (world CLIP)"] = CLIPImageReward(clip)
    rewards["CLIP-T (world CLIP)"] = CLIPTextReward(
        clip, global_description=True, warn_long_text=False
    )
    return rewards


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r; NaN where either side is constant (no correlation to speak of)."""
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def measure(generator: str, rewards: dict, grids: int, seed: int = 0) -> dict:
    """Draw ``grids`` grids, have the oracle judge them and every reward score them.

    Returns ``{"grids", "oracle": {"consistency", "alignment"} (means), "rewards": {name:
    {"mean", "r_consistency", "r_alignment"}}}``."""
    import torch
    from diffusers import FluxPipeline

    from demo.world_generator import GeneratorConfig, generator_world, sample_grids
    from demo.world_judge import judge_grids

    pipe = FluxPipeline.from_pretrained(generator)
    records = generator_world(GeneratorConfig(seed=seed)).make_prompts(grids, start=START)
    images = []
    for start in range(0, grids, BATCH):
        images += sample_grids(pipe, records[start : start + BATCH], seed=seed * 10_000 + start)
    judged = judge_grids(images, records)
    oracle = {
        key: np.array([item[key] for item in judged["per_item"]])
        for key in ("consistency", "alignment")
    }
    tensors = [torch.from_numpy(np.array(im)).permute(2, 0, 1).float() / 255 for im in images]
    prompts = [r["prompt"] for r in records]
    metadata = [{"layout": r["layout"], "theme": r["theme"]} for r in records]
    out = {
        "grids": grids,
        "oracle": {key: float(values.mean()) for key, values in oracle.items()},
        "rewards": {},
    }
    for name, reward in rewards.items():
        scores = np.asarray(reward(tensors, prompts, metadata), dtype=float)
        out["rewards"][name] = {
            "mean": float(scores.mean()),
            **{f"r_{key}": pearson(scores, values) for key, values in oracle.items()},
        }
    return out


def run(args: RewardOracleArguments) -> int:
    from demo import pretrained

    demo_output = Path(args.demo_output)
    generator = args.generator or str(pretrained.generator(args.seed))
    clip = args.clip or str(pretrained.world_clip(args.seed))
    result = measure(generator, rewards_of(demo_output, clip), args.grids, args.seed)
    print_table(
        f"Rewards vs the oracle on {args.grids} generated grids (oracle consistency "
        f"{result['oracle']['consistency']:.3f}, alignment {result['oracle']['alignment']:.3f})",
        ["reward", "mean", "Pearson r with consistency", "with alignment"],
        [
            [name, r["mean"], r["r_consistency"], r["r_alignment"]]
            for name, r in result["rewards"].items()
        ],
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m demo.reward_vs_oracle``; returns the exit status."""
    command = Command("reward-vs-oracle", RewardOracleArguments, run, __doc__.splitlines()[0])
    return run_cli("python -m demo.reward_vs_oracle", __doc__.split("\n\n")[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
