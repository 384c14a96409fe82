"""How many CPU threads torch computes with: a default that does not oversubscribe the cores.

torch starts one intra-op thread per core it sees, in every process: on a 2-core machine
already busy with other work, or under a launch of several processes per machine, the
threads outnumber the free cores and wait on each other at every parallel region (the tiny
SFT recipe took 50-70 s with the default threads and 12 s with one). As ``torchrun`` and
``accelerate launch`` do, every ``paco-*`` command therefore sets the threads before torch
computes: the cores this process may use (its CPU affinity and cgroup quota) that other
processes do not keep busy (the 1-minute load average), divided by the processes launched on
this machine, at least 1. ``OMP_NUM_THREADS`` set by the user (or by the launcher) wins.
Python code calls :func:`configure_cpu_threads` itself, or ``torch.set_num_threads``.

    >>> default_cpu_threads(cores=16, local_processes=4, busy=0.0)
    4
    >>> default_cpu_threads(cores=2, local_processes=1, busy=1.9)
    1
"""

from __future__ import annotations

import logging
import math
import os
import sys

logger = logging.getLogger(__name__)

__all__ = ["available_cores", "configure_cpu_threads", "default_cpu_threads"]

# Where launchers put the number of processes on this machine (torchrun/accelerate, MPI).
LOCAL_SIZE_VARIABLES = (
    "LOCAL_WORLD_SIZE",
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_SIZE",
)


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota
    (a container's ``--cpus``), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:  # cgroup v2: "<quota> <period>" or "max <period>"
        with open("/sys/fs/cgroup/cpu.max") as handle:
            quota, period = handle.read().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(cores, 1)


def default_cpu_threads(cores: int, local_processes: int, busy: float) -> int:
    """``cores`` less the ``busy`` ones (other processes' load, rounded to the nearest core),
    shared by ``local_processes``; at least 1."""
    free = max(cores - round(busy), 1)
    return max(free // max(local_processes, 1), 1)


def _local_processes() -> int:
    for name in LOCAL_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def configure_cpu_threads() -> int | None:
    """Set torch's intra-op threads (``OMP_NUM_THREADS`` for a torch not yet imported) to
    :func:`default_cpu_threads` of this machine, unless ``OMP_NUM_THREADS`` is set. Returns
    the threads set, or ``None`` when the user's (or launcher's) setting was kept."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        busy = 0.0
    cores = available_cores()
    threads = default_cpu_threads(cores, _local_processes(), busy)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # read by torch (and MKL) when they start
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    logger.info(
        "CPU threads: %d (%d cores, load %.1f, %d local processes); set OMP_NUM_THREADS to "
        "choose.", threads, cores, busy, _local_processes(),
    )  # fmt: skip
    return threads
