"""A torchrun rank keeps the priority it was started with: started in a session of its own
(as torchrun starts ranks) at niceness 7, ``python -m demo.keep_priority MODULE ARGS`` gives
its scheduling group niceness 7, where the kernel has such groups, then runs MODULE as
``__main__`` with ARGS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.keep_priority import AUTOGROUP, main

PROBE = """
import os, sys
group = open("/proc/self/autogroup").read().strip() if os.path.exists("/proc/self/autogroup") else "none"
# one write per line: two ranks share the pipe, and print() writes its parts one by one
os.write(1, " ".join(map(str, (__name__, os.nice(0), group, *sys.argv[1:]))).encode() + b"\\n")
"""
ROOT = Path(__file__).resolve().parents[2]


def run_probe(tmp_path: Path, command: list[str]) -> str:
    (tmp_path / "probe_rank.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    result = subprocess.run(
        ["nice", "-n", "7", sys.executable, *command],
        capture_output=True,
        text=True,
        env=env,
        start_new_session=True,
        check=True,
    )
    return result.stdout.strip()


def test_a_rank_in_its_own_session_keeps_its_niceness(tmp_path):
    out = run_probe(tmp_path, ["-m", "demo.keep_priority", "probe_rank", "train", "r.yaml"])
    name, niceness, *group, arg1, arg2 = out.split()
    assert (name, niceness, arg1, arg2) == ("__main__", "7", "train", "r.yaml")
    if os.path.exists(AUTOGROUP):
        assert group[-2:] == ["nice", "7"], out
        # Without it, the new session's group runs at the default priority.
        assert run_probe(tmp_path, ["-m", "probe_rank"]).split()[-2:] == ["nice", "0"]
    else:
        assert group == ["none"]


def test_torchrun_ranks_run_in_sessions_of_their_own_and_keep_their_niceness(tmp_path):
    """The real launcher: each rank leads a session of its own, and its group gets the
    rank's niceness only through the wrapper."""
    (tmp_path / "probe_rank.py").write_text(
        PROBE.replace("*sys.argv[1:]", "os.getsid(0) == os.getpid()")
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    launch = ["nice", "-n", "7", sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launch += ["--nproc_per_node=2", "-m"]
    for wrapper, group_niceness in ((["demo.keep_priority"], "7"), ([], "0")):
        result = subprocess.run(
            launch + wrapper + ["probe_rank"], capture_output=True, text=True, env=env, check=True
        )
        ranks = [line.split() for line in result.stdout.splitlines() if line.startswith("__main__")]
        assert len(ranks) == 2, result.stdout + result.stderr
        for rank in ranks:
            assert rank[1] == "7" and rank[-1] == "True"  # niceness 7, a session leader
            if os.path.exists(AUTOGROUP):
                assert rank[-3:-1] == ["nice", group_niceness], rank


def test_it_needs_a_module():
    with pytest.raises(SystemExit, match="usage: python -m demo.keep_priority MODULE"):
        main([])


def test_a_group_it_cannot_set_costs_only_the_priority(tmp_path):
    """Where the group cannot be set (here a folder stands in for it), the rank says so and
    still runs its module, at the niceness it was started with."""
    (tmp_path / "probe_rank.py").write_text(PROBE)
    run = (
        "import sys, demo.keep_priority as k; "
        f"k.AUTOGROUP = {str(tmp_path)!r}; k.main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    result = subprocess.run(
        ["nice", "-n", "5", sys.executable, "-c", run, "probe_rank", "train"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    name, niceness, *_, arg = result.stdout.split()
    assert (name, niceness, arg) == ("__main__", str(min(os.nice(0) + 5, 19)), "train")
    assert f"could not lower {tmp_path} (" in result.stderr
