"""``paco-grpo``: Flow-GRPO training from a YAML recipe, and the tiny offline generators.

    paco-grpo train recipes/grpo_flux_t2is.yaml --num_train_epochs 50 --train.resolution 512
    paco-grpo plan recipes/grpo_flux_t2is.yaml --num_processes 8 --gpu_memory_gb 80 [--json]
    paco-grpo tiny-flux tiny_flux          # build the tiny offline FLUX the CPU recipe uses
    paco-grpo tiny-qwen-image-edit tiny_qwen_edit   # one tiny-<pipeline> per registered one
    paco-grpo tiny-ocr tiny_ocr            # tiny offline GOT-OCR 2.0 for the `ocr` reward
    paco-grpo ocr-prompts recipes/data     # the OCR task's prompt files (ocr_train/test.txt)

The ``tiny-<pipeline>`` commands come from the generator registry (:mod:`paco_grpo.pipelines`):
one per registered pipeline, ``_`` written ``-``. Every ``train``/``plan`` flag is a
:class:`~paco_grpo.grpo_config.GRPOConfig` field (dotted for the
``train``/``test`` sections), read as YAML (``--rewards '{consistency: 1.0}'``); see
:mod:`paco_reward.command_line`. The launch's shape (processes, images per process,
optimizer steps per epoch) is checked first; then reward names resolve and their models load
on the process's device, before the generator does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from paco_reward.command_line import Command, config_field, run_cli

__all__ = ["main"]


@dataclass
class TinyArguments:
    """Build a tiny offline model folder (a registered generator's pipeline, or the OCR reader)."""

    output_dir: str = config_field(help="Folder to write the model to.", positional=True)
    seed: int = config_field(0, help="Seed of the random weights.")


@dataclass
class OCRPromptsArguments:
    """Write the OCR task's prompts: ocr_train.txt and ocr_test.txt, from templates and words."""

    output_dir: str = config_field(help="Folder to write the two files to.", positional=True)
    num_train: int = config_field(1000, help="Training prompts (ocr_train.txt).")
    num_test: int = config_field(100, help="Test prompts (ocr_test.txt), texts unseen in training.")
    seed: int = config_field(0, help="Seed of the draw; the same seed writes the same files.")


def train(config) -> int:
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


def _grpo_config_cls():
    from paco_grpo.grpo_config import GRPOConfig

    return GRPOConfig


def _plan_config_cls():
    from paco_grpo.planning import GRPOPlanConfig

    return GRPOPlanConfig


def tiny_command(spec) -> Command:
    """``paco-grpo tiny-<name>``: the registered pipeline ``spec``'s tiny builder."""

    def build(args: TinyArguments) -> int:
        print(spec.build_tiny(args.output_dir, seed=args.seed))
        return 0

    help = f"Build the tiny offline {spec.name} pipeline ({spec.diffusers_class})."
    return Command(tiny_command_name(spec.name), TinyArguments, build, help)


def tiny_command_name(pipeline: str) -> str:
    """The ``paco-grpo`` command that builds ``pipeline``'s tiny model.

    Example:
        >>> tiny_command_name("qwen_image_edit")
        'tiny-qwen-image-edit'
    """
    return "tiny-" + pipeline.replace("_", "-")


def tiny_ocr(args: TinyArguments) -> int:
    from paco_reward.testing.got_ocr2 import build_tiny_got_ocr2

    print(build_tiny_got_ocr2(args.output_dir, seed=args.seed))
    return 0


def ocr_prompts(args: OCRPromptsArguments) -> int:
    from paco_grpo.ocr_prompts import write_ocr_prompts

    for path in write_ocr_prompts(args.output_dir, args.num_train, args.num_test, args.seed):
        print(path)
    return 0


def commands() -> list[Command]:
    """Every ``paco-grpo`` command; the ``tiny-<pipeline>`` ones from the generator registry
    (imported here, not at module import: ``--help`` and usage errors need no torch)."""
    from paco_grpo.pipelines import PIPELINE_SPECS

    return [
        Command("train", _grpo_config_cls, train, "Run Flow-GRPO from a YAML recipe.",
                recipe=True, reads_inputs=True),  # fmt: skip
        Command("plan", _plan_config_cls, plan, "Memory per process of a launch.", recipe=True),
        *(tiny_command(spec) for spec in PIPELINE_SPECS.values()),
        Command("tiny-ocr", TinyArguments, tiny_ocr, "Build the tiny offline GOT-OCR 2.0."),
        Command("ocr-prompts", OCRPromptsArguments, ocr_prompts, "Write the OCR task's prompts."),
    ]


def __getattr__(name: str):
    if name == "COMMANDS":  # the list, for the docs and the tests (imports the registry)
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-grpo``; returns the exit status."""
    return run_cli("paco-grpo", __doc__.splitlines()[0], commands, argv)


if __name__ == "__main__":
    sys.exit(main())
