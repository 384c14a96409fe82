"""Reward overlap: share of a PaCo-GRPO step spent waiting on rewards, synchronous vs asynchronous.

The reward has a KNOWN cost: :class:`KnownCostReward` scores the panel-colour agreement
and then waits ``seconds_per_item`` per image, releasing the GIL (``time.sleep`` when called,
``asyncio.sleep`` when awaited) — a stand-in for a reward model on its own GPU or a reward
server. By default the cost per image equals the measured sampling cost per image (a 7B
evaluator judging the 6 panel pairs of a grid costs about as much as sampling it).

The same trainer runs the same epoch with ``async_rewards`` off, then on, in one run,
and the table shows per mode (mean over ``--repeats`` epochs, the modes alternating): step time, sampling, reward wait (time the trainer was
blocked on rewards), reward compute, training, and ``reward share = wait / step``.
Goal: the asynchronous share <= 10 %. The scores of the two modes must be identical.

    python -m benchmarks.grpo_reward_overlap                      # tiny FLUX on CPU
    python -m benchmarks.grpo_reward_overlap --device cuda --prompts 4 --group-size 8
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paco_grpo.rewards import PanelColourAgreementReward
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import InputError


@dataclass
class OverlapArguments:
    """Share of a PaCo-GRPO step spent waiting on rewards, synchronous vs asynchronous."""

    model: str | None = config_field(
        None, help="FluxPipeline folder (default: build the tiny FLUX)."
    )
    device: str = config_field("cpu", help="torch device.")
    prompts: int = config_field(4, help="Prompts per epoch.")
    group_size: int = config_field(8, help="Images per prompt.")
    batch_size: int = config_field(2, help="Images per sampling batch.")
    resolution: int = config_field(64, help="Training resolution.")
    steps: int = config_field(8, help="Denoising steps.")
    seconds_per_item: float | None = config_field(
        None,
        help="Reward cost per image (default: the measured sampling cost per image x "
        "--cost_ratio).",
    )
    cost_ratio: float = config_field(1.0, help="Reward cost / sampling cost per image.")
    repeats: int = config_field(2, help="Epochs per mode (alternating).")
    json: str | None = config_field(None, help="Also write the numbers as JSON here.")


class KnownCostReward(PanelColourAgreementReward):
    """Panel-colour agreement plus a fixed wait of ``seconds_per_item`` per image (GIL released).

    Example:
        >>> reward = KnownCostReward(0.0)
        >>> reward.name
        'known_cost'
    """

    name = "known_cost"

    def __init__(self, seconds_per_item: float, layout: str | None = "2x2") -> None:
        super().__init__(layout=layout)
        if seconds_per_item < 0:
            raise InputError(f"seconds_per_item must be >= 0; got {seconds_per_item}.")
        self.seconds_per_item = seconds_per_item

    def score(self, images, prompts, metadata) -> np.ndarray:
        time.sleep(self.seconds_per_item * len(images))
        return super().score(images, prompts, metadata)

    async def ascore(self, images, prompts, metadata) -> np.ndarray:
        await asyncio.sleep(self.seconds_per_item * len(images))  # like awaiting a server
        return super().score(images, prompts, metadata)


def _config(model: str, out: Path, args: OverlapArguments):
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
            "rewards": {"known_cost": 1.0},
            "aggregator": "weighted_sum",
            "max_sequence_length": 32,
            "lora_r": 8,
            "lora_alpha": 16,
            "num_train_epochs": 1,
            "prompts_per_epoch": args.prompts,
            "num_generations": args.group_size,
            "sample_batch_size": args.batch_size,
            "per_device_train_batch_size": args.group_size,
            "report_to": [],
            "num_sample_images": 0,
            "save_every": 0,
            "train": {
                "resolution": args.resolution,
                "num_steps": args.steps,
                "noise_steps": [1],
            },
            "test": {"every": 0},
        }
    )


def _measure(tmp: Path, args: OverlapArguments) -> tuple[dict, KnownCostReward, bool]:
    """Warm up, set the reward cost, check sync == async scores, time both modes."""
    import torch
    from diffusers import FluxPipeline

    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.testing.flux import build_tiny_flux
    from paco_reward.devices import resolve_device

    device = resolve_device(args.device)  # "cuda" -> this process's GPU, with its index
    model = args.model or str(build_tiny_flux(tmp / "flux", seed=0))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    pipe = FluxPipeline.from_pretrained(model, dtype=dtype).to(device)
    reward = KnownCostReward(0.0)
    trainer = GRPOTrainer(_config(model, tmp, args), rewards={"known_cost": reward}, pipeline=pipe)
    images = args.prompts * args.group_size

    trainer.config.async_rewards = False
    warm = trainer.run_epoch(0)  # warm-up, and the sampling cost the reward is matched to
    reward.seconds_per_item = (
        args.seconds_per_item
        if args.seconds_per_item is not None
        else args.cost_ratio * warm["time/sampling"] / images
    )
    scores = {}
    for mode in ("sync", "async"):  # the same samples (same weights, same seed) in both modes
        trainer.config.async_rewards = mode == "async"
        scores[mode] = trainer.sample_epoch(1).rewards["known_cost"]
    identical = bool(np.array_equal(scores["sync"], scores["async"]))

    keys = {
        "step_s": "time/step",
        "sampling_s": "time/sampling",
        "reward_wait_s": "time/reward_wait",
        "reward_compute_s": "time/reward_compute",
        "training_s": "time/training",
    }
    runs = {"sync": [], "async": []}
    for repeat in range(args.repeats):  # alternate the modes so load drift hits both alike
        for mode in ("sync", "async"):
            trainer.config.async_rewards = mode == "async"
            metrics = trainer.run_epoch(2 + repeat)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            runs[mode].append(metrics)
    rows = {}
    for mode, epochs in runs.items():
        rows[mode] = {k: float(np.mean([m[key] for m in epochs])) for k, key in keys.items()}
        rows[mode]["reward_share"] = rows[mode]["reward_wait_s"] / rows[mode]["step_s"]
    return rows, reward, identical


def measure(args: OverlapArguments) -> dict:
    """Run both modes, print the table; returns the numbers (also written to ``--json``)."""
    with tempfile.TemporaryDirectory(prefix="grpo-overlap-") as tmp:
        rows, reward, identical = _measure(Path(tmp), args)
    images = args.prompts * args.group_size
    batches = -(-images // args.batch_size)
    print(
        f"PaCo-GRPO epoch: {images} images in {batches} sampling batches on {args.device} "
        f"(mean of {args.repeats} epochs per mode); "
        f"reward cost {reward.seconds_per_item * 1e3:.1f} ms per image "
        f"({reward.seconds_per_item * images:.2f} s per epoch, known)"
    )
    header = ("mode", "step", "sampling", "reward wait", "reward compute", "training", "share")
    print("  ".join(f"{h:>14}" for h in header))
    for mode, r in rows.items():
        cells = [r["step_s"], r["sampling_s"], r["reward_wait_s"], r["reward_compute_s"]]
        cells.append(r["training_s"])
        print(
            f"{mode:>14}  "
            + "  ".join(f"{c:>13.3f}s" for c in cells)
            + f"  {100 * r['reward_share']:>13.1f}%"
        )
    share = rows["async"]["reward_share"]
    speedup = rows["sync"]["step_s"] / rows["async"]["step_s"]
    share_ratio = rows["sync"]["reward_share"] / max(share, 1e-12)
    print(
        f"reward share: sync {100 * rows['sync']['reward_share']:.1f}% -> async {100 * share:.1f}% "
        f"(x{share_ratio:.1f} less; goal <= 10%: {'met' if share <= 0.10 else 'NOT met'}); "
        f"step time sync / async = {speedup:.2f}; scores identical: {identical}"
    )
    result = {
        "device": args.device,
        "images": images,
        "batches": batches,
        "seconds_per_item": reward.seconds_per_item,
        "rows": rows,
        "share_ratio": share_ratio,
        "step_speedup": speedup,
        "scores_identical": identical,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


def run(args: OverlapArguments) -> int:
    measure(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("grpo-reward-overlap", OverlapArguments, run, "Sync vs async rewards.")
    return run_cli(
        "python -m benchmarks.grpo_reward_overlap", __doc__.split("\n\n")[0], [command], argv
    )


if __name__ == "__main__":
    sys.exit(main())
