"""Deadlines and limits of both servers, against the real ones over raw sockets: 200 stalled
connections (half a header; a body trickled a byte at a time) are closed by the request
deadline while a normal request is answered in its usual time, the concurrency limit
answers 503 past it, and SIGTERM stops ``paco-reward serve`` and ``paco-reward gateway``
(child processes) within their shutdown grace period while clients still hold connections."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from paco_reward.server import ServerConfig, ServerProcess, ServerThread, create_app, free_port
from paco_reward.server.config import ConnectionLimits
from paco_reward.server.gateway import create_gateway
from paco_reward.server.gateway_config import GatewayConfig
from paco_reward.server.limits import uvicorn_options
from tests.raw_http import connect, head
from tests.server.conftest import MODEL_NAME
from tests.server.test_gateway import data_url

DEADLINE = 1.5  # the request deadline of these tests (seconds; 30 by default)
STALLED = 200
GRACE = 2.0  # the shutdown grace period of the SIGTERM tests


class Stalls:
    """``n`` connections that never finish a request: half of them send half a header,
    the other half a whole header then a body of a byte every ``every`` seconds. A thread
    keeps them so and records when the server closes each."""

    def __init__(
        self, port: int, n: int = STALLED, every: float = 0.5, trickle: bool = True
    ) -> None:
        self.port, self.every = port, every
        self.sockets: list[socket.socket] = []
        self.trickling: set[int] = set()
        self.closed_after: dict[int, float] = {}
        self.stop = threading.Event()
        for k in range(n):
            sock = connect(port)
            if k % 2 or not trickle:
                sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
            else:
                headers = {"Content-Type": "application/json", "Content-Length": "100000"}
                sock.sendall(head("POST", "/v1/score", port, headers) + b"{")
                self.trickling.add(k)
            sock.setblocking(False)
            self.sockets.append(sock)
        self.opened = time.monotonic()
        self.thread = threading.Thread(target=self._keep, daemon=True)
        self.thread.start()

    def _keep(self) -> None:
        while not self.stop.is_set() and len(self.closed_after) < len(self.sockets):
            for k, sock in enumerate(self.sockets):
                if k in self.closed_after:
                    continue
                try:
                    if k in self.trickling:
                        sock.send(b" ")
                    if sock.recv(4096) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:  # closed by the server (reset, broken pipe, end of stream)
                    self.closed_after[k] = time.monotonic() - self.opened
            self.stop.wait(self.every)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for sock in self.sockets:
            sock.close()


def _score_body(tiny_reward, random_images) -> dict:
    policy = tiny_reward.backend.image_policy
    from paco_reward.images import resize_for_model

    images = [data_url(resize_for_model(x, policy)) for x in random_images(2, seed=9)]
    return {"model": MODEL_NAME, "images": images, "pairs": [[0, 1, "a fox"]]}


def _latency(url: str, body: dict) -> float:
    start = time.perf_counter()
    response = httpx.post(url, json=body, timeout=30)
    assert response.status_code == 200, response.text
    return time.perf_counter() - start


@pytest.fixture(params=["server", "gateway"])
def deadlined(request, tiny_reward, live_server):
    """The reward server, or a gateway in front of the session's live one, with the test
    deadline; yields its uvicorn thread."""
    limits = {"request_timeout": DEADLINE}
    if request.param == "server":
        config = ServerConfig(MODEL_NAME, max_batch_size=8, **limits)
        app = create_app(tiny_reward.backend, config)
    else:
        config = GatewayConfig(**limits)
        app = create_gateway({MODEL_NAME: live_server.base_url}, config)
    with ServerThread(app, **uvicorn_options(config)) as server:
        yield server


def test_stalled_connections_are_closed_by_the_deadline_and_others_are_served(
    deadlined, tiny_reward, random_images
):
    body = _score_body(tiny_reward, random_images)
    url = deadlined.base_url + "/score"
    usual = statistics.median(_latency(url, body) for _ in range(5))
    stalls = Stalls(deadlined.port)
    try:
        meanwhile = [_latency(url, body) for _ in range(5)]
        stalls.thread.join(timeout=DEADLINE + 10)
    finally:
        stalls.close()
    closed = sorted(stalls.closed_after.values())
    print(
        f"\nusual {usual * 1000:.0f} ms, with {STALLED} stalled connections "
        f"{statistics.median(meanwhile) * 1000:.0f} ms (max {max(meanwhile) * 1000:.0f}); "
        f"stalls closed after {closed[0]:.2f}-{closed[-1]:.2f} s (deadline {DEADLINE} s)"
    )
    assert len(closed) == STALLED  # every stalled connection was closed by the server ...
    assert closed[0] >= DEADLINE - 0.1  # ... by the deadline, not before it ...
    assert closed[-1] < DEADLINE + 5  # ... and soon after it (a busy 2-core machine)
    assert max(meanwhile) < max(1.0, 5 * usual)


def test_past_the_concurrency_limit_new_requests_get_503(tiny_reward, random_images):
    config = ServerConfig(
        MODEL_NAME, max_batch_size=8, request_timeout=DEADLINE, max_connections=20
    )
    body = _score_body(tiny_reward, random_images)
    with ServerThread(create_app(tiny_reward.backend, config), **uvicorn_options(config)) as server:
        # Half headers only: a request whose head arrives past the limit is answered 503
        stalls = Stalls(server.port, n=24, trickle=False)
        try:
            busy = httpx.post(server.base_url + "/score", json=body, timeout=30)
            assert busy.status_code == 503
            stalls.thread.join(timeout=DEADLINE + 10)  # the deadline frees the slots
            assert len(stalls.closed_after) == 24
        finally:
            stalls.close()
        assert httpx.post(server.base_url + "/score", json=body, timeout=30).status_code == 200


def _hold_connections(port: int) -> list[socket.socket]:
    """Connections a stop must not wait for: half headers, bodies being sent, idle ones."""
    held = []
    for k in range(30):
        sock = connect(port)
        if k % 3 == 0:
            sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        elif k % 3 == 1:
            headers = {"Content-Type": "application/json", "Content-Length": "100000"}
            sock.sendall(head("POST", "/v1/score", port, headers) + b'{"model": ')
        held.append(sock)
    time.sleep(0.3)
    return held


def _stop_within_grace(process: subprocess.Popen, port: int) -> float:
    held = _hold_connections(port)
    try:
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=GRACE + 15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"not stopped {GRACE + 15:.0f} s after SIGTERM")
        return time.monotonic() - start
    finally:
        for sock in held:
            sock.close()


LIMIT_FLAGS = ["--request_timeout", "60", "--shutdown_timeout", str(GRACE)]


def test_sigterm_stops_serve_within_its_grace_period(tiny_model_dir):
    server = ServerProcess(tiny_model_dir, args=["--served_model_name", MODEL_NAME, *LIMIT_FLAGS])
    server.start()
    try:
        stopped = _stop_within_grace(server.process, server.port)
    finally:
        server.kill()
    print(f"\nserve stopped {stopped:.2f} s after SIGTERM (grace {GRACE} s)")
    assert stopped < GRACE + 3


def test_sigterm_stops_the_gateway_within_its_grace_period():
    port = free_port()
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "paco_reward.cli", "gateway", f"judge=http://127.0.0.1:{free_port()}/v1",
               "--port", str(port), *LIMIT_FLAGS]  # fmt: skip
    process = subprocess.Popen(command, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:  # its /health answers (503: the upstream is not running)
            assert process.poll() is None and time.monotonic() < deadline
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        stopped = _stop_within_grace(process, port)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"\ngateway stopped {stopped:.2f} s after SIGTERM (grace {GRACE} s)")
    assert stopped < GRACE + 3


def test_limits_are_checked():
    from paco_reward import ConfigError

    for bad, match in (
        ({"request_timeout": 0}, "request_timeout must be > 0"),
        ({"shutdown_timeout": -1}, "shutdown_timeout must be > 0"),
        ({"max_connections": 0}, "max_connections must be >= 1"),
    ):
        for config in (ConnectionLimits, ServerConfig, GatewayConfig):
            with pytest.raises(ConfigError, match=match):
                config(**bad)
