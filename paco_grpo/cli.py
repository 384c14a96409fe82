"""``paco-grpo``: Flow-GRPO training from a YAML recipe.

    paco-grpo train recipes/grpo_flux_t2is.yaml --num_train_epochs 50 --train.resolution 512
    paco-grpo tiny-flux tiny_flux          # build the tiny offline FLUX the CPU recipe uses
    paco-grpo tiny-edit tiny_kontext       # tiny offline FLUX.1-Kontext (or --pipeline qwen_image_edit)

Overrides are ``--dotted.field value`` (or ``--field=value``); values are parsed as YAML
(``--rewards '{consistency: 1.0}'``). Reward names resolve here, through
:func:`paco_grpo.rewards.build_rewards`, before any model loads.
"""

from __future__ import annotations

import argparse
import logging
import sys

import yaml

__all__ = ["main", "parse_overrides"]


def parse_overrides(tokens: list[str]) -> dict:
    """``["--a.b", "1", "--c=x"]`` -> ``{"a.b": 1, "c": "x"}``.

    Raises:
        ValueError: a token that is not ``--key`` or a key without a value.
    """
    out, k = {}, 0
    while k < len(tokens):
        token = tokens[k]
        if not token.startswith("--") or token == "--":
            raise ValueError(f"Expected an override like --train.resolution 512; got {token!r}.")
        key = token[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            k += 1
        else:
            if k + 1 >= len(tokens):
                raise ValueError(f"Override --{key} has no value.")
            value = tokens[k + 1]
            k += 2
        out[key.replace("-", "_")] = yaml.safe_load(value)
    return out


def _train(args, extra: list[str]) -> int:
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.rewards import build_rewards

    config = GRPOConfig.from_yaml(args.recipe, parse_overrides(extra))
    rewards = build_rewards(config.rewards, config.reward_kwargs)
    test_rewards = None
    if config.test.rewards is not None or config.test.reward_kwargs is not None:
        test_rewards = build_rewards(
            config.test.rewards or config.rewards, config.test.reward_kwargs or config.reward_kwargs
        )
    trainer = GRPOTrainer(config, rewards=rewards, test_rewards=test_rewards)
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


def _tiny_flux(args, extra: list[str]) -> int:
    from paco_grpo.testing.flux import build_tiny_flux

    if extra:
        raise ValueError(f"tiny-flux takes no overrides; got {extra}.")
    print(build_tiny_flux(args.output_dir, seed=args.seed))
    return 0


def _tiny_edit(args, extra: list[str]) -> int:
    if extra:
        raise ValueError(f"tiny-edit takes no overrides; got {extra}.")
    if args.pipeline == "flux_kontext":
        from paco_grpo.testing.flux_kontext import build_tiny_flux_kontext as build
    else:
        from paco_grpo.testing.qwen_image_edit import build_tiny_qwen_image_edit as build
    print(build(args.output_dir, seed=args.seed))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-grpo``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="paco-grpo", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train", help="Run Flow-GRPO from a YAML recipe (+ --key value overrides)."
    )
    train.add_argument("recipe", help="YAML recipe of GRPOConfig fields.")
    train.set_defaults(func=_train)
    tiny = sub.add_parser("tiny-flux", help="Build the tiny offline FLUX pipeline folder.")
    tiny.add_argument("output_dir")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=_tiny_flux)
    edit = sub.add_parser(
        "tiny-edit", help="Build a tiny offline editing pipeline folder (FLUX.1-Kontext-shaped)."
    )
    edit.add_argument("output_dir")
    edit.add_argument(
        "--pipeline", choices=("flux_kontext", "qwen_image_edit"), default="flux_kontext"
    )
    edit.add_argument("--seed", type=int, default=0)
    edit.set_defaults(func=_tiny_edit)
    args, extra = parser.parse_known_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.func(args, extra)
    except (ValueError, FileNotFoundError) as err:
        print(f"paco-grpo: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
