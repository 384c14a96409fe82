"""CPU threads: every ``paco-*`` command sets torch's intra-op threads to the free cores
shared by the machine's processes (as torchrun and accelerate do), unless OMP_NUM_THREADS
says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paco_reward.cpu_threads import available_cores, configure_cpu_threads, default_cpu_threads

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("cores", "local", "busy", "expected"),
    [
        (16, 1, 0.0, 16),  # an idle machine, one process: every core
        (16, 4, 0.0, 4),  # accelerate launch --num_processes 4: a quarter each
        (2, 1, 1.9, 1),  # a 2-core machine another job keeps busy: one thread
        (2, 1, 0.3, 2),
        (8, 16, 0.0, 1),  # more processes than cores: never 0
        (4, 1, 9.0, 1),
    ],
)
def test_the_default_shares_the_free_cores_among_the_local_processes(cores, local, busy, expected):
    assert default_cpu_threads(cores, local, busy) == expected


def _threads(env: dict[str, str]) -> int:
    """torch's intra-op threads in a fresh process after ``configure_cpu_threads``, as a
    command runs it (before torch is imported)."""
    code = (
        "from paco_reward.cpu_threads import configure_cpu_threads\n"
        "configure_cpu_threads()\n"
        "import torch\n"
        "print(torch.get_num_threads())\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, "PYTHONPATH": str(ROOT), **env},
                         capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    return int(out.stdout.split()[-1])


def test_a_command_never_starts_more_threads_than_free_cores_and_omp_num_threads_wins():
    cores = available_cores()
    busy = os.getloadavg()[0]
    threads = _threads({})
    assert 1 <= threads <= cores
    assert threads <= max(cores - round(busy) + 1, 1)  # the load may move a little meanwhile
    assert _threads({"LOCAL_WORLD_SIZE": str(cores * 2)}) == 1  # more processes than cores
    # the user's setting is kept, where the default would be 1
    assert _threads({"OMP_NUM_THREADS": "2", "LOCAL_WORLD_SIZE": str(cores * 2)}) == min(2, cores)


def test_a_set_omp_num_threads_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert configure_cpu_threads() is None
    assert os.environ["OMP_NUM_THREADS"] == "1"


def test_every_command_sets_the_threads_before_it_runs(tmp_path):
    clean = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-m", "data_pipeline.cli", "-v", "stats", str(tmp_path)],
        env={**clean, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "paco_reward.cpu_threads: CPU threads: " in out.stderr
    assert "set OMP_NUM_THREADS to choose" in out.stderr
