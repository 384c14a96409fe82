"""``paco-reward gateway`` in front of two live ``paco-reward serve`` servers: scores through
it equal each server's own, bodies pass unchanged, refusals are typed, and, with one server a
child process stalled and then killed for real, a stalled upstream is a 504 and a dead one a
502 while the other keeps serving. The same against two real vLLM servers is in
tests/vllm_peer/test_vllm_gateway.py."""

from __future__ import annotations

import base64
import io
import os
import signal
import threading
import time

import httpx
import numpy as np
import pytest

from paco_reward import ConfigError, PacoReward, RewardServerError
from paco_reward.images import resize_for_model
from paco_reward.server import ServerConfig, ServerProcess, ServerThread, create_app
from paco_reward.server.gateway import create_gateway
from paco_reward.server.gateway_config import GatewayConfig
from paco_reward.templates import render_instruction

TOL = 1e-4  # in-process vs served, as tests/server/test_server_http.py
JUDGE_A, JUDGE_B = "judge-a", "judge-b"
TIMEOUT = 2.0  # the gateway's upstream timeout in these tests


@pytest.fixture(scope="module")
def locals_by_name(tiny_reward, tiny_qwen3_vl_dir):
    return {JUDGE_A: tiny_reward, JUDGE_B: PacoReward.from_pretrained(tiny_qwen3_vl_dir)}


@pytest.fixture(scope="module")
def upstream_a(tiny_reward):
    app = create_app(tiny_reward.backend, ServerConfig(JUDGE_A, max_batch_size=16))
    with ServerThread(app) as server:
        yield server


@pytest.fixture(scope="module")
def upstreams(upstream_a, locals_by_name):
    """Two servers in threads, one per judge: their names and API roots."""
    app = create_app(locals_by_name[JUDGE_B].backend, ServerConfig(JUDGE_B, max_batch_size=16))
    with ServerThread(app) as upstream_b:
        yield {JUDGE_A: upstream_a.base_url, JUDGE_B: upstream_b.base_url}


def gateway_to(upstreams: dict, **config) -> ServerThread:
    config = {"upstream_timeout": TIMEOUT, "health_timeout": TIMEOUT, **config}
    return ServerThread(create_gateway(upstreams, GatewayConfig(**config)))


@pytest.fixture(scope="module")
def gateway(upstreams):
    with gateway_to(upstreams) as server:
        yield server


def root(server) -> str:
    return server.base_url.removesuffix("/v1")


def data_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def scores_at(url: str, name: str, pairs) -> np.ndarray:
    # One request at a time: each pair is a micro-batch of its own wherever it is sent.
    rm = PacoReward.from_server(url, name, max_concurrency=1, cache_size=0, retries=0)
    try:
        return rm.score_pairs(pairs)
    finally:
        rm.backend.close()


def test_scores_through_the_gateway_equal_each_server_directly(
    gateway, upstreams, locals_by_name, random_images
):
    images = random_images(4, size=(64, 48), seed=41)
    pairs = [(images[0], images[1], "a fox"), (images[2], images[3], "a cat")]
    listed = httpx.get(gateway.base_url + "/models").json()["data"]
    for name, url in upstreams.items():
        through, direct = scores_at(gateway.base_url, name, pairs), scores_at(url, name, pairs)
        print(f"\n{name}: through the gateway {through}, directly {direct}")
        np.testing.assert_array_equal(through, direct)
        np.testing.assert_allclose(through, locals_by_name[name].score_pairs(pairs), atol=TOL)
        # its /v1/models entry as the upstream gives it (the client reads its `paco` part)
        assert httpx.get(url + "/models").json()["data"] == [e for e in listed if e["id"] == name]
        # a native /v1/score answer, byte for byte
        policy = locals_by_name[name].backend.image_policy
        body = {
            "model": name,
            "images": [data_url(resize_for_model(x, policy)) for x in images[:2]],
            "pairs": [[0, 1, "a fox"], [1, 0, "a fox"]],
        }
        answers = [httpx.post(u + "/score", json=body) for u in (gateway.base_url, url)]
        assert answers[0].status_code == 200 and answers[0].content == answers[1].content
    assert [e["id"] for e in listed] == list(upstreams)
    health = httpx.get(root(gateway) + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    for name, report in health.json()["upstreams"].items():
        assert report["status"] == "ok" and name in report["health"]["models"]


def test_refusals_are_typed_and_name_what_to_fix(gateway, upstreams, upstream_a):
    post = httpx.post
    unknown = post(gateway.base_url + "/chat/completions", json={"model": "nope"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert f"serves {sorted(upstreams)}" in unknown.json()["error"]["message"]
    assert post(gateway.base_url + "/score", content=b"{not json").status_code == 400
    get_only = httpx.get(gateway.base_url + "/chat/completions")
    assert get_only.status_code == 404 and "POST" in get_only.json()["error"]["message"]

    with gateway_to(upstreams, api_key="s3cret", max_body_bytes=4096) as keyed:
        body = {"model": JUDGE_A, "images": [], "pairs": [[0, 0, "x"]]}
        assert post(keyed.base_url + "/score", json=body).status_code == 401
        assert httpx.get(keyed.base_url + "/models").status_code == 401
        assert httpx.get(root(keyed) + "/health").status_code == 200  # no key needed
        key = {"Authorization": "Bearer s3cret"}
        # past the key, the upstream judges the request (it needs images) and its answer
        # comes back as it is
        passed = post(keyed.base_url + "/score", json=body, headers=key)
        direct = post(upstream_a.base_url + "/score", json=body)
        assert passed.status_code == direct.status_code == 400
        assert passed.content == direct.content
        large = {**body, "padding": "x" * 5000}
        refused = post(keyed.base_url + "/score", json=large, headers=key)
        assert (refused.status_code, refused.json()["error"]["code"]) == (413, "body_too_large")

    with gateway_to({"other-name": upstream_a.base_url}) as wrong:
        listed = httpx.get(wrong.base_url + "/models")
        assert listed.status_code == 502
        assert listed.json()["error"]["code"] == "upstream_model_mismatch"
        assert f"serves ['{JUDGE_A}']" in listed.json()["error"]["message"]

    with pytest.raises(ConfigError, match="not an http"):
        create_gateway({"a": "127.0.0.1:8000"})


def request(gateway, name: str, pair_image) -> httpx.Response:
    body = {
        "model": name,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": pair_image}},
                    {"type": "image_url", "image_url": {"url": pair_image}},
                    {"type": "text", "text": render_instruction("consistency", "x")},
                ],
            }
        ],
        "max_tokens": 1,
        "logprobs": True,
    }
    return httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=30)


@pytest.fixture
def judge_b_process(tiny_qwen3_vl_dir):
    """Judge B served by ``paco-reward serve`` in a child process, to stall and kill."""
    with ServerProcess(tiny_qwen3_vl_dir, args=["--served_model_name", JUDGE_B]) as server:
        yield server


@pytest.mark.slow
def test_a_stalled_upstream_is_a_504_and_a_dead_one_a_502(
    upstream_a, judge_b_process, random_images
):
    """Judge B is stopped (SIGSTOP), resumed, then killed (SIGKILL) while a request waits."""
    image = data_url(random_images(1, size=(56, 56), seed=42)[0])
    pid = judge_b_process.process.pid
    with gateway_to({JUDGE_A: upstream_a.base_url, JUDGE_B: judge_b_process.base_url}) as gateway:
        assert request(gateway, JUDGE_B, image).status_code == 200

        os.kill(pid, signal.SIGSTOP)  # the kernel still accepts connections; nothing answers
        try:
            start = time.monotonic()
            stalled = request(gateway, JUDGE_B, image)
            waited = time.monotonic() - start
            health = httpx.get(root(gateway) + "/health", timeout=30)
            other = request(gateway, JUDGE_A, image)
        finally:
            os.kill(pid, signal.SIGCONT)
        error = stalled.json()["error"]
        assert (stalled.status_code, error["type"], error["code"]) == (
            504,
            "GatewayTimeoutError",
            "upstream_timeout",
        )
        assert JUDGE_B in error["message"] and TIMEOUT <= waited < TIMEOUT + 5
        assert health.status_code == 503
        reports = health.json()["upstreams"]
        assert reports[JUDGE_B]["status"] == "down" and reports[JUDGE_A]["status"] == "ok"
        assert other.status_code == 200  # the other judge kept serving
        assert request(gateway, JUDGE_B, image).status_code == 200  # resumed

        # Killed while a request waits on it, then down for good.
        os.kill(pid, signal.SIGSTOP)
        cut: dict = {}
        waiting = threading.Thread(target=lambda: cut.update(r=request(gateway, JUDGE_B, image)))
        waiting.start()
        time.sleep(TIMEOUT / 4)
        judge_b_process.kill()
        waiting.join()
        afterwards = request(gateway, JUDGE_B, image)
        for response in (cut["r"], afterwards):
            error = response.json()["error"]
            print(f"\n{response.status_code}: {error['message']}")
            assert (response.status_code, error["type"], error["code"]) == (
                502,
                "BadGatewayError",
                "upstream_unreachable",
            )
            assert JUDGE_B in error["message"]
        health = httpx.get(root(gateway) + "/health", timeout=30)
        assert health.status_code == 503
        assert health.json()["upstreams"][JUDGE_B]["code"] == "upstream_unreachable"
        assert request(gateway, JUDGE_A, image).status_code == 200
        # /v1/models lists B marked down (A stays usable); B's client says why it cannot score
        with pytest.raises(
            RewardServerError, match="upstream does not answer.*upstream_unreachable"
        ):
            PacoReward.from_server(gateway.base_url, JUDGE_B, retries=1, backoff=0.01)
        PacoReward.from_server(gateway.base_url, JUDGE_A, retries=0).backend.close()
