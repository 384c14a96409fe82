"""``paco-reward train RECIPE [--key value ...]`` and ``paco-reward merge BASE ADAPTER OUT``.

A recipe is a flat YAML file whose keys are :class:`PacoSFTConfig` fields; unknown keys
fail at start-up, and ``--key value`` flags override the file (the one command-line dialect
of :mod:`paco_reward.command_line`)::

    paco-reward train recipes/tiny_cpu.yaml --max_steps 200 --output_dir runs/tiny
    paco-reward merge Qwen/Qwen2.5-VL-7B-Instruct runs/lora runs/merged
    paco-reward plan recipes/paco_reward_7b_lora.yaml --num_processes 8 --gpu_memory_gb 80 --sharded
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paco_reward.command_line import Command, config_field

logger = logging.getLogger(__name__)


def load_recipe(path: str | Path, overrides: Sequence[str] = ()):
    """Parse a YAML recipe plus ``--key value`` overrides into a :class:`PacoSFTConfig`
    (the command line of ``paco-reward train``, see :mod:`paco_reward.command_line`).

    Raises:
        ValueError: for an unknown key in the file, or an invalid value.
        SystemExit: (code 2) for an unknown command-line flag.
    """
    from paco_reward.command_line import parse_config
    from paco_reward.training.sft_config import PacoSFTConfig

    return parse_config(
        PacoSFTConfig, [str(path), *overrides], recipe=True, prog="paco-reward train"
    )


def run_training(config) -> dict[str, Any]:
    """Train as ``config`` says, save weights + processor + model card to ``output_dir``
    (and ``output_dir/merged`` when ``save_merged``); returns the final held-out metrics."""
    from paco_reward.launch import check_single_job
    from paco_reward.planning import check_plan
    from paco_reward.training.loading import build_trainer, model_init_kwargs
    from paco_reward.training.merge import merge_lora
    from paco_reward.training.model_card import recipe_dict, write_model_card
    from paco_reward.training.planning import plan_sft

    check_single_job(config.world_size)  # before the model loads
    sharded = bool(config.deepspeed) or getattr(config, "deepspeed_plugin", None) is not None
    check_plan(
        lambda gpu_gb: plan_sft(config, num_processes=config.world_size, gpu_memory_gb=gpu_gb,
                                sharded=sharded),
        config.device, skip=config.skip_plan_check, is_main_process=config.process_index == 0,
    )  # fmt: skip
    trainer = build_trainer(config)
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    output_dir = Path(config.output_dir)
    trainer.save_model(str(output_dir))
    metrics = trainer.evaluate() if trainer.eval_dataset is not None else {}
    # Every process trains and evaluates (collectives); one writes the files.
    if not trainer.is_world_process_zero():
        return metrics
    trainer.processing_class.save_pretrained(str(output_dir))
    data = {
        "dataset": config.dataset_path,
        "train rows": len(trainer.train_dataset),
        "eval rows": len(trainer.eval_dataset) if trainer.eval_dataset is not None else 0,
    }
    write_model_card(
        output_dir,
        base_model=config.model_name_or_path,
        recipe=recipe_dict(config),
        metrics=metrics,
        data=data,
        adapter=str(output_dir) if config.use_lora else None,
        model_path=str(output_dir),
    )
    (output_dir / "final_metrics.json").write_text(json.dumps(metrics, indent=2))
    if config.use_lora and config.save_merged:  # onto the revision the adapter trained on
        hub = model_init_kwargs(config)[1]
        merge_lora(config.model_name_or_path, output_dir, output_dir / "merged", **hub)
    return metrics


@dataclass
class MergeArguments:
    """Merge a LoRA adapter into its base model: a plain Hugging Face (and vLLM) folder."""

    base: str = config_field(help="Base model folder or hub id.", positional=True)
    adapter: str = config_field(help="LoRA adapter folder.", positional=True)
    output_dir: str = config_field(help="Where the merged model goes.", positional=True)
    dtype: str | None = config_field(None, help="Saved weight dtype (default: the base's).")


def train(config) -> int:
    metrics = run_training(config)
    if int(os.environ.get("RANK", "0")) == 0:  # once, also under torchrun
        print(json.dumps(metrics, indent=2))
    return 0


def merge(args: MergeArguments) -> int:
    from paco_reward.training.merge import merge_lora

    print(merge_lora(args.base, args.adapter, args.output_dir, dtype=args.dtype))
    return 0


def plan(config) -> int:
    return config.print_plan(config.plan())


def _sft_plan_cls():
    from paco_reward.training.planning import SFTPlanConfig

    return SFTPlanConfig


def _sft_config_cls():
    from paco_reward.training.sft_config import PacoSFTConfig

    return PacoSFTConfig


COMMANDS = [
    Command(
        "train",
        _sft_config_cls,
        train,
        "SFT the pairwise evaluator from a YAML recipe.",
        recipe=True,
    ),  # fmt: skip
    Command("plan", _sft_plan_cls, plan, "Memory per process of a launch.", recipe=True),
    Command("merge", MergeArguments, merge, "Merge a LoRA adapter into its base model."),
]
