"""Run the reward server in a background thread or a child process (tests, demo, benchmarks).

>>> with ServerThread(create_app(backend, ServerConfig("tiny"))) as server:   # doctest: +SKIP
...     rm = PacoReward.from_server(server.base_url, model="tiny")
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from paco_reward.errors import RewardServerError

logger = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def wait_until_healthy(base_url: str, timeout: float = 60.0, process=None) -> None:
    """Poll ``GET {root}/health`` until it answers 200, or raise
    :class:`~paco_reward.errors.RewardServerError` (also when ``process`` exits first)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RewardServerError(f"server process exited with code {process.returncode}")
        try:
            if httpx.get(root + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RewardServerError(f"reward server at {root} not healthy after {timeout}s")


class ServerThread:
    """Serve an ASGI ``app`` with uvicorn in a daemon thread on ``host:port`` (a free port by
    default). Use as a context manager; ``base_url`` is the OpenAI API root. Other keyword
    arguments go to ``uvicorn.Config`` (e.g. ``http=``, ``timeout_keep_alive=``)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int | None = None, **uvicorn_config):
        import uvicorn

        self.host = host
        self.port = port or free_port(host)
        config = uvicorn.Config(
            app,
            host=host,
            port=self.port,
            **{"log_level": "warning", "lifespan": "on", "access_log": False, **uvicorn_config},
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="paco-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RewardServerError(f"uvicorn did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ServerProcess:
    """``paco-reward serve`` in a child process (so it can be killed for real).

    Args:
        model: model folder; ``args`` are extra command-line flags.
    """

    def __init__(
        self, model: str | Path, port: int | None = None, args: list[str] | None = None
    ) -> None:
        self.port = port or free_port()
        self.command = [
            sys.executable,
            "-m",
            "paco_reward.server.cli",
            "serve",
            str(model),
            "--port",
            str(self.port),
            *(args or []),
        ]
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120.0) -> ServerProcess:
        # The child imports this very package, wherever it was imported from.
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = {
            **os.environ,
            "PYTHONPATH": path,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
        self.process = subprocess.Popen(self.command, env=env)
        wait_until_healthy(self.base_url, timeout, self.process)
        return self

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, in-flight requests are cut."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
