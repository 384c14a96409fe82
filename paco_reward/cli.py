"""``paco-reward``: score, explain, train, merge, serve.

Each subcommand lives in its own module exposing ``register(subparsers)``; this
file only lists them, so adding a command never touches another's code.
"""

from __future__ import annotations

import argparse
import importlib
import logging

COMMAND_MODULES = [
    "paco_reward.commands.score",
    "paco_reward.server.cli",
    "paco_reward.training.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paco-reward", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
