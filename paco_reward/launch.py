"""One launch, one job: refuse ranks that a launcher started but accelerate runs alone.

``torchrun --nproc_per_node 8`` (or any launcher) tells each rank ``WORLD_SIZE=8``. When
accelerate does not take the ranks as one job (on a CPU without ``ACCELERATE_USE_CPU``,
say), each rank becomes a one-process job of its own: eight identical runs that write the
same output folder at once (on a CPU, ``ACCELERATE_USE_CPU=1`` makes them one job). The
trainers call :func:`check_single_job` right after their
``Accelerator`` exists, before anything heavy loads.

    >>> check_single_job(2, {"WORLD_SIZE": "2"})
    >>> check_single_job(1, {})
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from paco_reward.errors import LaunchError

__all__ = ["LaunchError", "check_single_job", "is_loopback", "launched_nodes"]


def check_single_job(num_processes: int, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`LaunchError` when the launcher's ``WORLD_SIZE`` disagrees with the
    number of processes accelerate runs as one job.

    Args:
        num_processes: ``Accelerator().num_processes``.
        environ: the environment to read (default ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    launched = environ.get("WORLD_SIZE")
    if launched is None or int(launched) == num_processes:
        return
    rank = environ.get("RANK", "?")
    raise LaunchError(
        f"The launcher started WORLD_SIZE={launched} processes (this is rank {rank}), but "
        f"accelerate runs this one as a job of {num_processes}: every rank would train alone "
        "and write the same output folder. Launch as one job: on GPUs, "
        "`accelerate launch --num_processes N ...` (or torchrun, one GPU per rank); on a CPU, "
        "`ACCELERATE_USE_CPU=1 accelerate launch --num_processes N ...` (or ACCELERATE_USE_CPU=1 "
        "torchrun ...; `accelerate launch --cpu` starts a single process)."
    )


def launched_nodes(environ: Mapping[str, str] | None = None) -> int:
    """The nodes of this launch, as the launcher tells each rank: ``WORLD_SIZE`` over
    ``LOCAL_WORLD_SIZE`` (torchrun and ``accelerate launch`` set both); 1 without them.

    Example:
        >>> launched_nodes({"WORLD_SIZE": "14", "LOCAL_WORLD_SIZE": "7"})
        2
    """
    environ = os.environ if environ is None else environ
    world, local = environ.get("WORLD_SIZE"), environ.get("LOCAL_WORLD_SIZE")
    if not world or not local or int(world) % int(local):
        return 1
    return int(world) // int(local)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's own loopback: a server
    bound there is reachable from this machine only, i.e. node-local in a launch of several
    nodes.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("10.0.0.7")
        (True, True, False)
    """
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
