"""Fixtures of the server tests: one live server (uvicorn thread, free loopback port) around
the session's tiny evaluator, shared by every test that does not need its own."""

from __future__ import annotations

import pytest

from paco_reward import PacoReward
from paco_reward.server import ServerConfig, ServerThread, create_app

MODEL_NAME = "tiny-paco"


@pytest.fixture(scope="session")
def live_server(tiny_reward):
    """A running server on 127.0.0.1 serving the tiny evaluator as ``tiny-paco``."""
    app = create_app(tiny_reward.backend, ServerConfig(MODEL_NAME, max_batch_size=16))
    with ServerThread(app) as server:
        yield server


@pytest.fixture
def remote_reward(live_server):
    """A fresh ``PacoReward.from_server`` client (empty cache) on the live server."""
    rm = PacoReward.from_server(live_server.base_url, MODEL_NAME, retries=1, timeout=30.0)
    yield rm
    rm.backend.close()
