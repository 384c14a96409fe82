"""``paco-grpo``: Flow-GRPO training from a YAML recipe, and the tiny offline generators.

    paco-grpo train recipes/grpo_flux_t2is.yaml --num_train_epochs 50 --train.resolution 512
    paco-grpo plan recipes/grpo_flux_t2is.yaml --num_processes 8 --gpu_memory_gb 80 [--json]
    paco-grpo tiny-flux tiny_flux          # build the tiny offline FLUX the CPU recipe uses
    paco-grpo tiny-edit tiny_kontext       # tiny offline FLUX.1-Kontext (or --pipeline qwen_image_edit)
    paco-grpo tiny-sd3 tiny_sd3            # tiny offline Stable Diffusion 3.5
    paco-grpo tiny-flux2 tiny_flux2_klein  # tiny offline FLUX.2-klein (or --pipeline flux2)
    paco-grpo tiny-qwen-image tiny_qwen_image   # tiny offline Qwen-Image (text-to-image)
    paco-grpo tiny-ocr tiny_ocr            # tiny offline GOT-OCR 2.0 for the `ocr` reward
    paco-grpo ocr-prompts recipes/data     # the OCR task's prompt files (ocr_train/test.txt)

Every flag is a :class:`~paco_grpo.grpo_config.GRPOConfig` field (dotted for the
``train``/``test`` sections), read as YAML (``--rewards '{consistency: 1.0}'``); see
:mod:`paco_reward.command_line`. The launch's shape (processes, images per process,
optimizer steps per epoch) is checked first; then reward names resolve and their models load
on the process's device, before the generator does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

from paco_grpo.grpo_config import GRPOConfig
from paco_reward.command_line import Command, config_field, run_cli

__all__ = ["main"]


@dataclass
class TinyFluxArguments:
    """Build the tiny offline FLUX pipeline folder the CPU recipes use."""

    output_dir: str = config_field(help="Folder to write the pipeline to.", positional=True)
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass
class TinyQwenImageArguments:
    """Build the tiny offline Qwen-Image pipeline folder of the Qwen-Image CPU recipe."""

    output_dir: str = config_field(help="Folder to write the pipeline to.", positional=True)
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass
class TinyEditArguments:
    """Build a tiny offline editing pipeline folder (FLUX.1-Kontext or Qwen-Image-Edit shaped)."""

    output_dir: str = config_field(help="Folder to write the pipeline to.", positional=True)
    pipeline: Literal["flux_kontext", "qwen_image_edit"] = config_field(
        "flux_kontext", help="Which editing pipeline to build."
    )
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass
class TinySD3Arguments:
    """Build the tiny offline Stable Diffusion 3.5 pipeline folder of its CPU recipe."""

    output_dir: str = config_field(help="Folder to write the pipeline to.", positional=True)
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass
class TinyFlux2Arguments:
    """Build a tiny offline FLUX.2 pipeline folder (FLUX.2-klein base or FLUX.2-dev shaped)."""

    output_dir: str = config_field(help="Folder to write the pipeline to.", positional=True)
    pipeline: Literal["flux2_klein", "flux2"] = config_field(
        "flux2_klein", help="Which FLUX.2 pipeline to build."
    )
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass
class TinyOCRArguments:
    """Build the tiny offline GOT-OCR 2.0 folder the OCR CPU recipe's reward reads with."""

    output_dir: str = config_field(help="Folder to write the model to.", positional=True)
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass
class OCRPromptsArguments:
    """Write the OCR task's prompts: ocr_train.txt and ocr_test.txt, from templates and words."""

    output_dir: str = config_field(help="Folder to write the two files to.", positional=True)
    num_train: int = config_field(1000, help="Training prompts (ocr_train.txt).")
    num_test: int = config_field(100, help="Test prompts (ocr_test.txt), texts unseen in training.")
    seed: int = config_field(0, help="Seed of the draw; the same seed writes the same files.")


def train(config: GRPOConfig) -> int:
    from paco_grpo.grpo_trainer import GRPOTrainer

    trainer = GRPOTrainer(config)  # checks the launch, then builds rewards on its device
    history = trainer.train()
    if history and trainer.accelerator.is_main_process:
        last = history[-1]
        summary = ", ".join(
            f"{k}={v:.4f}"
            for k, v in last.items()
            if k.startswith("reward/") and k.endswith("/mean")
        )
        print(f"epoch {last['epoch']}: {summary}; outputs in {config.output_dir}/")
    return 0


def plan(config) -> int:
    return config.print_plan(config.plan())


def _plan_config_cls():
    from paco_grpo.planning import GRPOPlanConfig

    return GRPOPlanConfig


def tiny_flux(args: TinyFluxArguments) -> int:
    from paco_grpo.testing.flux import build_tiny_flux

    print(build_tiny_flux(args.output_dir, seed=args.seed))
    return 0


def tiny_qwen_image(args: TinyQwenImageArguments) -> int:
    from paco_grpo.testing.qwen_image import build_tiny_qwen_image

    print(build_tiny_qwen_image(args.output_dir, seed=args.seed))
    return 0


def tiny_edit(args: TinyEditArguments) -> int:
    if args.pipeline == "flux_kontext":
        from paco_grpo.testing.flux_kontext import build_tiny_flux_kontext as build
    else:
        from paco_grpo.testing.qwen_image_edit import build_tiny_qwen_image_edit as build
    print(build(args.output_dir, seed=args.seed))
    return 0


def tiny_sd3(args: TinySD3Arguments) -> int:
    from paco_grpo.testing.sd3 import build_tiny_sd3

    print(build_tiny_sd3(args.output_dir, seed=args.seed))
    return 0


def tiny_flux2(args: TinyFlux2Arguments) -> int:
    from paco_grpo.testing import flux2

    build = (
        flux2.build_tiny_flux2_klein if args.pipeline == "flux2_klein" else flux2.build_tiny_flux2
    )
    print(build(args.output_dir, seed=args.seed))
    return 0


def tiny_ocr(args: TinyOCRArguments) -> int:
    from paco_reward.testing.got_ocr2 import build_tiny_got_ocr2

    print(build_tiny_got_ocr2(args.output_dir, seed=args.seed))
    return 0


def ocr_prompts(args: OCRPromptsArguments) -> int:
    from paco_grpo.ocr_prompts import write_ocr_prompts

    for path in write_ocr_prompts(args.output_dir, args.num_train, args.num_test, args.seed):
        print(path)
    return 0


COMMANDS = [
    Command("train", GRPOConfig, train, "Run Flow-GRPO from a YAML recipe.", recipe=True),
    Command("plan", _plan_config_cls, plan, "Memory per process of a launch.", recipe=True),
    Command("tiny-flux", TinyFluxArguments, tiny_flux, "Build the tiny offline FLUX."),
    Command(
        "tiny-qwen-image", TinyQwenImageArguments, tiny_qwen_image, "Build the tiny Qwen-Image."
    ),
    Command("tiny-edit", TinyEditArguments, tiny_edit, "Build a tiny offline editing pipeline."),
    Command("tiny-sd3", TinySD3Arguments, tiny_sd3, "Build the tiny offline Stable Diffusion 3.5."),
    Command("tiny-flux2", TinyFlux2Arguments, tiny_flux2, "Build a tiny offline FLUX.2 pipeline."),
    Command("tiny-ocr", TinyOCRArguments, tiny_ocr, "Build the tiny offline GOT-OCR 2.0."),
    Command("ocr-prompts", OCRPromptsArguments, ocr_prompts, "Write the OCR task's prompts."),
]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-grpo``; returns the exit status."""
    return run_cli("paco-grpo", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
