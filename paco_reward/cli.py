"""``paco-reward``: score, explain, train, merge, serve, gateway.

Each subcommand module lists its :class:`~paco_reward.command_line.Command` objects in
``COMMANDS`` (a dataclass of arguments and a function); this file only gathers them, and
:func:`paco_reward.command_line.run_cli` turns them into the command line.
"""

from __future__ import annotations

from paco_reward.command_line import run_cli
from paco_reward.commands.score import COMMANDS as SCORE_COMMANDS
from paco_reward.server.cli import COMMANDS as SERVE_COMMANDS
from paco_reward.training.cli import COMMANDS as TRAIN_COMMANDS

COMMANDS = [*SCORE_COMMANDS, *TRAIN_COMMANDS, *SERVE_COMMANDS]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-reward``; returns the exit status."""
    return run_cli("paco-reward", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
