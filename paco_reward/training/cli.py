"""``paco-reward train RECIPE [--key value ...]`` and ``paco-reward merge BASE ADAPTER OUT``.

A recipe is a flat YAML file whose keys are :class:`PacoSFTConfig` fields; unknown keys
fail at start-up, and ``--key value`` flags override the file::

    paco-reward train recipes/tiny_cpu.yaml --max_steps 200 --output_dir runs/tiny
    paco-reward merge Qwen/Qwen2.5-VL-7B-Instruct runs/lora runs/merged
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def load_recipe(path: str | Path, overrides: Sequence[str] = ()):
    """Parse a YAML recipe plus ``--key value`` overrides into a :class:`PacoSFTConfig`.

    Raises:
        ValueError: for an unknown key in the file or on the command line, or an invalid value.
    """
    import yaml
    from transformers import HfArgumentParser

    from paco_reward.training.sft_config import PacoSFTConfig

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No recipe file at {str(path)!r}.")
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise ValueError(f"Recipe {str(path)!r} must be a mapping of config fields to values.")
    fields = {f.name for f in dataclasses.fields(PacoSFTConfig) if f.init}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(
            f"Recipe {str(path)!r} has unknown keys {unknown}; every key must be a "
            "PacoSFTConfig field (see `paco-reward train --help`)."
        )
    parser = HfArgumentParser(PacoSFTConfig)
    parser.set_defaults(**values)
    config, extra = parser.parse_args_into_dataclasses(
        args=list(overrides), return_remaining_strings=True
    )
    if extra:
        raise ValueError(f"Unknown command-line overrides {extra}; use --<config field> <value>.")
    return config


def run_training(config) -> dict[str, Any]:
    """Train as ``config`` says, save weights + processor + model card to ``output_dir``
    (and ``output_dir/merged`` when ``save_merged``); returns the final held-out metrics."""
    from paco_reward.training.merge import merge_lora
    from paco_reward.training.model_card import recipe_dict, write_model_card
    from paco_reward.training.sft_trainer import PacoSFTTrainer

    trainer = PacoSFTTrainer(args=config)
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    output_dir = Path(config.output_dir)
    trainer.save_model(str(output_dir))
    trainer.processing_class.save_pretrained(str(output_dir))
    metrics = trainer.evaluate() if trainer.eval_dataset is not None else {}
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
    if config.use_lora and config.save_merged:
        merge_lora(config.model_name_or_path, output_dir, output_dir / "merged")
    return metrics


def _train(args: argparse.Namespace) -> int:
    config = load_recipe(args.recipe, args.overrides)
    metrics = run_training(config)
    print(json.dumps(metrics, indent=2))
    return 0


def _merge(args: argparse.Namespace) -> int:
    from paco_reward.training.merge import merge_lora

    out = merge_lora(args.base, args.adapter, args.output_dir, dtype=args.dtype)
    print(out)
    return 0


def register(subparsers) -> None:
    """Add the ``train`` and ``merge`` subcommands to a ``paco-reward`` subparser set."""
    train = subparsers.add_parser(
        "train",
        help="SFT the pairwise evaluator from a YAML recipe.",
        description="Train from RECIPE (YAML of PacoSFTConfig fields); --key value overrides.",
    )
    train.add_argument("recipe", help="YAML recipe, e.g. recipes/tiny_cpu.yaml")
    train.add_argument(
        "overrides", nargs=argparse.REMAINDER, help="--<field> <value> pairs overriding the recipe"
    )
    train.set_defaults(func=_train)
    merge = subparsers.add_parser(
        "merge", help="Merge a LoRA adapter into its base model (a plain HF/vLLM folder)."
    )
    merge.add_argument("base", help="base model folder or hub id")
    merge.add_argument("adapter", help="LoRA adapter folder")
    merge.add_argument("output_dir", help="where the merged model goes")
    merge.add_argument("--dtype", default=None, help="saved weight dtype (default: the base's)")
    merge.set_defaults(func=_merge)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m paco_reward.training.cli train RECIPE ...``)."""
    parser = argparse.ArgumentParser(prog="paco-reward")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
