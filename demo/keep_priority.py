"""Run a module as a torchrun rank that keeps the priority it was started with.

``torch.distributed.run`` starts every rank in a session of its own. Where the kernel
schedules by session (autogroup: ``/proc/sys/kernel/sched_autogroup_enabled`` is 1, the
default of most distributions), a process's nice value only ranks it within its session's
group, and the groups share the CPU equally. So the demo's SFT ranks, started at niceness 10
below the generator's pretraining, still took about 40 % of its core (LOG, session 13).
:func:`keep_priority` gives the rank's session the rank's own niceness; then the module
runs as ``python -m`` runs it. Priorities change no number.

    python -m torch.distributed.run --nproc_per_node=2 \\
        -m demo.keep_priority paco_reward.cli train recipe.yaml
"""

from __future__ import annotations

import os
import runpy
import sys

AUTOGROUP = "/proc/self/autogroup"


def keep_priority() -> int:
    """Set this process's scheduling group to its own niceness, where the kernel has such
    groups; returns the niceness. Where the group cannot be set (a read-only ``/proc``), the
    rank says so and runs on: only its priority is lost."""
    niceness = os.nice(0)
    if niceness > 0 and os.path.exists(AUTOGROUP):
        try:
            with open(AUTOGROUP, "w") as handle:
                handle.write(str(niceness))
        except OSError as err:
            print(f"demo.keep_priority: could not lower {AUTOGROUP} ({err})", file=sys.stderr)
    return niceness


def main(argv: list[str] | None = None) -> None:
    """``python -m demo.keep_priority MODULE [ARGS...]``: :func:`keep_priority`, then run
    ``MODULE`` as ``__main__`` with ``ARGS``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: python -m demo.keep_priority MODULE [ARGS...]")
    keep_priority()
    sys.argv = [argv[0], *argv[1:]]
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
