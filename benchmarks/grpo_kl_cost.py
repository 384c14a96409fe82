"""What the frozen-reference forward pass costs at ``beta = 0`` (the paper's recipe).

Earlier versions ran the frozen base model at every trained noise step only to log a KL.
Now it runs when ``beta > 0`` or ``log_kl: true``. This runs one epoch of the tiny CPU recipe
with ``log_kl`` off and on (the old behaviour), alternating the order over ``--repeats``,
on the same tiny FLUX and seed, and prints the training-phase time of each, their ratio and
whether the losses are the same.

    python -m benchmarks.grpo_kl_cost --repeats 3
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from paco_reward.command_line import Command, config_field, run_cli

# The tiny CPU recipe of the checkout this module sits in (it is not package data).
TINY_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo_tiny_cpu.yaml"


@dataclass
class KLCostArguments:
    """What the frozen-reference forward pass costs at beta = 0."""

    recipe: str = config_field(
        str(TINY_RECIPE), help="GRPO recipe to run one epoch of (default: the tiny CPU one)."
    )
    repeats: int = config_field(3, help="Runs per mode, the order alternating.")


def measure(args: KLCostArguments) -> dict:
    """Run both modes, print the times; returns the numbers."""
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.testing.flux import build_tiny_flux

    tmp = Path(tempfile.mkdtemp(prefix="grpo-kl-"))
    flux = build_tiny_flux(tmp / "flux", seed=0)
    times: dict[bool, list[float]] = {False: [], True: []}
    losses: dict[bool, list[float]] = {False: [], True: []}
    for repeat in range(args.repeats):
        for log_kl in (False, True) if repeat % 2 == 0 else (True, False):
            cfg = GRPOConfig.from_yaml(
                args.recipe,
                {
                    "model_name_or_path": str(flux),
                    "output_dir": str(tmp / f"run-{repeat}-{log_kl}"),
                    "report_to": [],
                    "num_train_epochs": 1,
                    "num_sample_images": 0,
                    "save_epochs": 0,
                    "test.eval_epochs": 0,
                    "log_kl": log_kl,
                },
            )
            metrics = GRPOTrainer(cfg).run_epoch(0)
            times[log_kl].append(metrics["time/training"])
            losses[log_kl].append(metrics["train/loss"])
    skipped, with_ref = statistics.median(times[False]), statistics.median(times[True])
    result = {
        "training_s_beta0_skip_reference": skipped,
        "training_s_with_reference": with_ref,
        "ratio": skipped / with_ref,
        "saving": 1 - skipped / with_ref,
        "same_losses": losses[False] == losses[True],
    }
    print(f"training phase, median of {args.repeats} alternating runs (tiny FLUX, CPU):")
    print(f"  reference skipped (beta = 0): {skipped:.3f} s")
    print(f"  reference run (log_kl):       {with_ref:.3f} s")
    print(f"  ratio {result['ratio']:.3f} ({result['saving']:.0%} less); same losses: "
          f"{result['same_losses']} {losses[False]}")  # fmt: skip
    return result


def run(args: KLCostArguments) -> int:
    measure(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("grpo-kl-cost", KLCostArguments, run, "Time the reference pass.")
    return run_cli("python -m benchmarks.grpo_kl_cost", __doc__.split("\n\n")[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
