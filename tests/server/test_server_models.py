"""Several evaluators behind one ``paco-reward serve`` port: each scores as it does in-process,
picked by its name; an unknown name is a 404 listing the served ones; requests are batched
per model; the limits and the API key hold for every model."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from paco_reward import ConfigError, PacoReward, RewardServerError
from paco_reward.server import ServerConfig, ServerThread, create_app
from paco_reward.server.decode import TINY_PNG_1X1

TOL = 1e-4  # as tests/server/test_server_http.py
QWEN2, QWEN3 = "tiny-qwen2.5-vl", "tiny-qwen3-vl"
PNG = "data:image/png;base64," + TINY_PNG_1X1


@pytest.fixture(scope="module")
def qwen3_reward(tiny_qwen3_vl_dir):
    return PacoReward.from_pretrained(tiny_qwen3_vl_dir)


@pytest.fixture(scope="module")
def locals_by_name(tiny_reward, qwen3_reward):
    return {QWEN2: tiny_reward, QWEN3: qwen3_reward}


def serve(locals_by_name, **config) -> ServerThread:
    backends = {name: rm.backend for name, rm in locals_by_name.items()}
    return ServerThread(create_app(backends, ServerConfig(**config)))


def client(server: ServerThread, name: str, **kwargs) -> PacoReward:
    return PacoReward.from_server(server.base_url, name, retries=0, timeout=60.0, **kwargs)


def test_two_evaluators_behind_one_port_score_as_in_process(locals_by_name, random_images):
    images = random_images(4, size=(64, 48), seed=31)
    pairs = [(images[0], images[1], "a fox"), (images[2], images[3], "a cat")]
    with serve(locals_by_name, max_batch_size=8) as server:
        entries = httpx.get(server.base_url + "/models").json()["data"]
        assert [e["id"] for e in entries] == [QWEN2, QWEN3]
        scores = {}
        for name, local in locals_by_name.items():
            remote = client(server, name)
            try:
                # each name reads its own model's advertisement (Qwen3-VL: 32-pixel tokens)
                assert remote.backend.image_policy == local.backend.image_policy
                scores[name] = remote.score_pairs(pairs)
                np.testing.assert_allclose(scores[name], local.score_pairs(pairs), atol=TOL)
            finally:
                remote.backend.close()
        # the two judges differ, so a request answered by the wrong one would fail above
        assert np.abs(scores[QWEN2] - scores[QWEN3]).max() > 0.01, scores
        with pytest.raises(RewardServerError, match=rf"'nope'.*\['{QWEN2}', '{QWEN3}'\]"):
            client(server, "nope")
        response = httpx.post(
            server.base_url + "/score", json={"model": "nope", "images": [], "pairs": []}
        )
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["code"] == "model_not_found"
        assert f"serves ['{QWEN2}', '{QWEN3}']" in error["message"]


def test_a_concurrent_mix_is_batched_per_model(locals_by_name, random_images):
    images = random_images(8, size=(64, 48), seed=32)
    requests = {
        QWEN2: [(images[k], images[k + 1], f"theme {k}") for k in range(6)],
        QWEN3: [(images[k + 1], images[k], f"theme {k}") for k in range(4)],
    }
    # A wait long enough for every request of the mix to arrive before a batch runs.
    with serve(locals_by_name, max_batch_size=64, max_wait_ms=400) as server:
        remotes = {name: client(server, name, max_concurrency=8) for name in requests}

        async def mix():
            return await asyncio.gather(
                *(remotes[name].ascore_pairs(pairs) for name, pairs in requests.items())
            )

        got = dict(zip(requests, asyncio.run(mix())))
        health = httpx.get(server.base_url.removesuffix("/v1") + "/health").json()
    for name, pairs in requests.items():
        np.testing.assert_allclose(got[name], locals_by_name[name].score_pairs(pairs), atol=TOL)
        batching = health["models"][name]["batching"]
        print(f"\n{name}: {batching}")
        # each model's batcher saw exactly its own pairs, merged into fewer calls
        assert batching["pairs"] == len(pairs)
        assert batching["largest_batch"] >= 2 and batching["batches"] < len(pairs)


def test_limits_and_the_api_key_hold_for_every_model(locals_by_name, random_images):
    a, b = random_images(2, seed=33)
    with serve(locals_by_name, api_key="s3cret", max_pairs=2) as server:
        for name, local in locals_by_name.items():
            with pytest.raises(RewardServerError, match="api_key"):
                client(server, name)
            body = {"model": name, "images": [PNG], "pairs": [[0, 0, "x"]] * 3}
            refused = httpx.post(server.base_url + "/score", json=body)
            assert refused.status_code == 401
            too_many = httpx.post(
                server.base_url + "/score",
                json=body,
                headers={"Authorization": "Bearer s3cret"},
            )
            assert (too_many.status_code, too_many.json()["error"]["code"]) == (
                413,
                "too_many_pairs",
            )
            remote = client(server, name, api_key="s3cret")
            try:
                assert remote.score(a, b, "x") == pytest.approx(local.score(a, b, "x"), abs=TOL)
            finally:
                remote.backend.close()


def test_several_backends_are_named_by_their_mapping(tiny_reward):
    with pytest.raises(ConfigError, match="names one backend"):
        create_app({"a": tiny_reward.backend}, ServerConfig("a"))
    with pytest.raises(ConfigError, match="non-empty model names"):
        create_app({}, ServerConfig())
