"""Several servers behind one client: requests spread over the replicas, a dead replica is
left out at once (no back-off, no retry spent), and a call fails only when every replica
is down, never with a made-up score. The real-kill case against vLLM is in tests/vllm_peer."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from paco_grpo.rewards.consistency import ConsistencyReward
from paco_reward import PacoReward, RewardServerError
from paco_reward.errors import InputError
from paco_reward.server import ServerConfig, ServerThread, create_app, free_port

MODEL_NAME = "tiny-paco"  # served by the live_server fixture (tests/server/conftest.py)


@pytest.fixture(scope="module")
def second_server(tiny_reward):
    app = create_app(tiny_reward.backend, ServerConfig(MODEL_NAME, max_batch_size=16))
    with ServerThread(app) as server:
        yield server


def test_requests_spread_and_a_dead_replica_is_skipped(
    live_server, second_server, tiny_reward, random_images, caplog
):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="paco_reward.remote_backend"):
        rm = PacoReward.from_server(
            [live_server.base_url, dead, second_server.base_url],
            MODEL_NAME,
            retries=0,
            cache_size=0,
            replica_cooldown=600,
        )
    assert f"Replica {dead} does not answer" in caplog.text
    images = random_images(8, seed=21)
    pairs = [(images[i % 8], images[(i + 3) % 8], f"theme {i % 3}") for i in range(16)]
    scores = rm.score_pairs(pairs)
    np.testing.assert_allclose(scores, tiny_reward.score_pairs(pairs), atol=1e-4)
    info = {r["url"]: r for r in rm.backend.replica_info()}
    assert info[live_server.base_url]["sent"] >= 6 and info[second_server.base_url]["sent"] >= 6
    assert info[dead]["down"] and info[dead]["failures"] == 1  # tried once, then left out
    assert info[dead]["sent"] == 1
    assert rm.backend.retries_done == 0  # failing over is not a retry


def test_all_replicas_down_raises_and_never_scores(random_images):
    dead = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    with pytest.raises(RewardServerError, match=r"replicas .* failed /models after 2 attempts"):
        PacoReward.from_server(dead, MODEL_NAME, retries=1, backoff=0.01, seed=0)


def test_replica_list_is_checked():
    with pytest.raises(InputError, match="base_url must be"):
        PacoReward.from_server([], MODEL_NAME)
    with pytest.raises(InputError, match="lists a replica twice"):
        PacoReward.from_server(["http://127.0.0.1:1/v1", "http://127.0.0.1:1/v1/"], MODEL_NAME)


def test_consistency_reward_takes_a_replica_list(live_server, second_server, tiny_reward):
    import torch

    grids = [torch.rand(3, 112, 112, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    prompts = ["a fox in four seasons, 2x2 grid"] * 3
    metadata = [{"layout": "2x2"}] * 3
    remote = ConsistencyReward(
        MODEL_NAME, server_url=[live_server.base_url, second_server.base_url], cache_size=0
    )
    local = ConsistencyReward(tiny_reward)
    np.testing.assert_allclose(
        remote(grids, prompts, metadata), local(grids, prompts, metadata), atol=1e-4
    )
    assert all(r["sent"] > 0 for r in remote.evaluator.backend.replica_info())
