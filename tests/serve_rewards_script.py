"""``recipes/serve_rewards.sh`` in a child process, run as its comment documents, for the tests
of both its paths (tests/server: one ``paco-reward serve``; tests/vllm_peer: a vLLM server per
model behind ``paco-reward gateway``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from paco_reward.server.runner import free_port, wait_until_healthy
from paco_reward.testing.vllm_server import _descendants, _signal

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def serve_rewards(
    models: dict[str, Path],
    log: Path,
    timeout: float,
    flags: Sequence[str] = (),
    **variables: str,
) -> Iterator[str]:
    """Run the script on ``models`` (served name -> folder) with the environment
    ``variables`` (``GPUS``, ``SERVER``, ...) and the servers' ``flags`` on a free port; yield
    its API root once its ``/health`` answers 200. Then SIGTERM it and check that every
    process it started ended."""
    port = free_port()
    env = {
        **os.environ,
        "MODEL_PATHS": ",".join(str(path) for path in models.values()),
        "MODEL_NAMES": ",".join(models),
        "PORT": str(port),
        "PYTHON": sys.executable,
        # the children import this checkout, whatever the venv installed
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        **variables,
    }
    with open(log, "wb") as out:
        script = subprocess.Popen(
            ["bash", "recipes/serve_rewards.sh", *flags], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_healthy(base_url, timeout=timeout, process=script)
    except (RuntimeError, TimeoutError) as err:
        _stop(script)
        raise RuntimeError(f"{err}; the script's log:\n{log.read_text()[-4000:]}") from None
    started = [script.pid, *_descendants(script.pid)]
    try:
        yield base_url
    finally:
        _stop(script)
        deadline = time.monotonic() + 60
        left = started
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = [pid for pid in left if _alive(pid)]
        for pid in left:
            _signal(pid)
    assert script.returncode in (0, 143, -15), log.read_text()[-2000:]  # 143: its TERM trap
    assert not left, f"processes the script started outlived it: {left}"


def _stop(script: subprocess.Popen) -> None:
    script.terminate()
    try:
        script.wait(timeout=120)
    except subprocess.TimeoutExpired:
        script.kill()
        script.wait()


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
