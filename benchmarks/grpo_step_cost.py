"""Cost of one PaCo-GRPO epoch at 512² vs 1024² training resolution, same model, one run.

Resolution decoupling (train at 512², evaluate at 1024²) is the paper's 2x saving
(6.0 h vs 12.0 h); per epoch the goal is ``cost(512²) / cost(1024²) <= 1/3.5``.

    python -m benchmarks.grpo_step_cost                      # tiny FLUX on CPU
    python -m benchmarks.grpo_step_cost --real-shape --device cuda --layers 2 2

``--real-shape`` builds a transformer with FLUX.1-dev's widths (24 heads x 128, 64 latent
channels, 4096/768 text widths) and ``--layers`` double/single blocks, random weights, tiny
text encoders and VAE. Epoch = ``--prompts`` prompts x ``--group-size`` images, the paper's
10 steps with the SDE at step 1, LoRA r64 on the paper's targets, panel-colour reward.
Prints a table and the ratio; ``--json PATH`` also writes the numbers.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError


@dataclass
class StepCostArguments:
    """Cost of one PaCo-GRPO epoch at 512² vs 1024² training resolution."""

    model: str | None = config_field(
        None, help="FluxPipeline folder (default: build the tiny FLUX)."
    )
    device: str = config_field("cpu", help="torch device.")
    real_shape: bool = config_field(
        False, help="Build a transformer with FLUX.1-dev's widths (random weights)."
    )
    layers: list[int] = config_field(
        lambda: [1, 1], help="Double and single transformer blocks of the built model."
    )
    prompts: int = config_field(2, help="Prompts per epoch.")
    group_size: int = config_field(2, help="Images per prompt.")
    batch_size: int = config_field(2, help="Images per sampling / training batch.")
    json: str | None = config_field(None, help="Also write the numbers as JSON here.")

    def __post_init__(self) -> None:
        if len(self.layers) != 2:
            raise ConfigError(f"layers must be two numbers (DOUBLE SINGLE); got {self.layers}.")


def _config(model: str, out: Path, args: StepCostArguments, resolution: int):
    import torch

    from paco_grpo.grpo_config import GRPOConfig

    prompts = out / "prompts.txt"
    prompts.write_text(
        "\n".join(
            f"FOUR-PANEL Images with a 2x2 grid layout. Subject {k}." for k in range(args.prompts)
        )
        + "\n"
    )
    return GRPOConfig.from_dict(
        {
            "model_name_or_path": model,
            "prompt_file": str(prompts),
            "output_dir": str(out / "run"),
            "rewards": {"panel_colour_agreement": 1.0},
            "aggregator": "weighted_sum",
            "max_sequence_length": 32,
            "dtype": "bfloat16" if torch.device(args.device).type == "cuda" else "float32",
            "lora_r": 64,
            "lora_alpha": 128,
            "num_train_epochs": 1,
            "prompts_per_epoch": args.prompts,
            "num_generations": args.group_size,
            "sample_batch_size": args.batch_size,
            "per_device_train_batch_size": args.batch_size,
            "report_to": [],
            "num_sample_images": 0,
            "save_every": 0,
            "train": {"resolution": resolution, "num_steps": 10, "noise_steps": [1]},
            "test": {"every": 0},
        }
    )


def measure(args: StepCostArguments) -> dict:
    """Run the three epochs, print the table; returns the numbers (also written to ``--json``)."""
    import torch
    from diffusers import FluxPipeline

    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.testing.flux import build_tiny_flux
    from paco_reward.devices import resolve_device

    device = resolve_device(args.device)  # "cuda" -> this process's GPU, with its index
    tmp = Path(tempfile.mkdtemp(prefix="grpo-cost-"))
    model = args.model
    if model is None:
        overrides = {"num_layers": args.layers[0], "num_single_layers": args.layers[1]}
        if args.real_shape:
            overrides.update(
                in_channels=64,
                num_attention_heads=24,
                attention_head_dim=128,
                joint_attention_dim=4096,
                pooled_projection_dim=768,
                axes_dims_rope=(16, 56, 56),
            )
        model = str(build_tiny_flux(tmp / "flux", seed=0, **overrides))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    pipe = FluxPipeline.from_pretrained(model, dtype=dtype).to(device)
    trainer = GRPOTrainer(_config(model, tmp, args, 512), pipeline=pipe)

    rows = {}
    for label, resolution in (("warm-up", 512), ("512", 512), ("1024", 1024)):
        trainer.config.train.resolution = resolution
        start = time.perf_counter()
        metrics = trainer.run_epoch(0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        rows[label] = {
            "resolution": resolution,
            "sampling_s": metrics["time/sampling"],
            "reward_s": metrics["time/reward"],
            "training_s": metrics["time/training"],
            "epoch_s": time.perf_counter() - start,
        }
    del rows["warm-up"]
    ratio = rows["512"]["epoch_s"] / rows["1024"]["epoch_s"]
    images = args.prompts * args.group_size
    print(
        f"One GRPO epoch ({images} images, 10 steps, SDE at step 1) on {args.device}"
        f"{' (real-shape transformer)' if args.real_shape else ' (tiny FLUX)'}:"
    )
    print(f"{'resolution':>10}  {'sampling':>9}  {'reward':>7}  {'training':>9}  {'epoch':>8}")
    for row in rows.values():
        print(
            f"{row['resolution']:>8}²  {row['sampling_s']:>8.2f}s  {row['reward_s']:>6.2f}s  "
            f"{row['training_s']:>8.2f}s  {row['epoch_s']:>7.2f}s"
        )
    goal = 1 / 3.5
    print(
        f"cost(512²) / cost(1024²) = {ratio:.3f}  (goal <= {goal:.3f}: {'met' if ratio <= goal else 'NOT met'})"
    )
    result = {"device": args.device, "real_shape": args.real_shape, "rows": rows, "ratio": ratio}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


def run(args: StepCostArguments) -> int:
    measure(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("grpo-step-cost", StepCostArguments, run, "Time 512² vs 1024² epochs.")
    return run_cli("python -m benchmarks.grpo_step_cost", __doc__.split("\n\n")[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
