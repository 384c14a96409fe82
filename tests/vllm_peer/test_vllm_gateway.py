"""Two judges behind one port with vLLM, as ``recipes/serve_rewards.sh`` starts them: a stock
vLLM server per model behind ``paco-reward gateway``. Through the gateway each judge scores
exactly as its own server does, its tokenizer routes by name, a streamed answer comes as
server-sent events saying what the server says directly, and SIGTERM to the script stops
every server it started."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from peer_settings import EXACT

from paco_reward import PacoReward
from paco_reward.server.runner import free_port
from paco_reward.testing import build_tiny_qwen2_5_vl
from paco_reward.testing.vllm_server import CPU_ARGS
from tests.serve_rewards_script import serve_rewards

JUDGES = ("judge-seed-0", "judge-seed-1")


@pytest.fixture(scope="module")
def second_model_dir(tmp_path_factory):
    """The session's vLLM-compatible tiny evaluator with other weights (seed 1)."""
    return build_tiny_qwen2_5_vl(
        tmp_path_factory.mktemp("tiny-vllm-seed-1") / "model",
        seed=1,
        max_pixels=16 * 28 * 28,
        vllm_compatible=True,
        text_config={"initializer_range": 0.3},
        vision_config={"initializer_range": 0.3},
    )


@pytest.fixture(scope="module")
def script(vllm_model_dir, second_model_dir, tmp_path_factory):
    """``bash recipes/serve_rewards.sh`` with two models on vLLM: yields the gateway's and each
    vLLM server's API roots; stopped by SIGTERM, nothing it started is left."""
    models = dict(zip(JUDGES, (vllm_model_dir, second_model_dir)))
    upstream_ports = [free_port(), free_port()]
    variables = {
        "UPSTREAM_PORTS": ",".join(map(str, upstream_ports)),
        "GPUS": "",  # a CPU
        "DTYPE": "float32",
        "SERVER": "vllm",
    }
    log = tmp_path_factory.mktemp("serve-rewards") / "script.log"
    # the CPU flags go to each vLLM server, as any flags after the models do
    with serve_rewards(models, log, timeout=900, flags=CPU_ARGS, **variables) as gateway:
        yield gateway, {name: f"http://127.0.0.1:{p}/v1" for name, p in zip(JUDGES, upstream_ports)}


def scores(url: str, name: str, pairs) -> np.ndarray:
    # One request at a time: every pair is computed alone, wherever it is sent.
    rm = PacoReward.from_server(url, name, max_concurrency=1, cache_size=0)
    try:
        return rm.score_pairs(pairs)
    finally:
        rm.backend.close()


def streamed(url: str, name: str) -> dict:
    """A streamed text-only chat answer, read event by event: its content type, text, finish
    reason and last line. (How vLLM groups tokens into events depends on timing, so two
    answers are compared by what they say, not by their number of events.)"""
    body = {
        "model": name,
        "messages": [{"role": "user", "content": "Answer Yes or No."}],
        "max_tokens": 6,
        "temperature": 0.0,
        "stream": True,
    }
    text, finish, lines = "", None, []
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in filter(None, response.iter_lines()):
            lines.append(line)
            if line.startswith("data: {"):
                (choice,) = json.loads(line.removeprefix("data: "))["choices"]
                text += choice["delta"].get("content") or ""
                finish = choice["finish_reason"] or finish
        kind = response.headers["content-type"]
    assert all(line.startswith("data: ") for line in lines) and len(lines) >= 3, lines
    return {"content-type": kind, "text": text, "finish": finish, "last": lines[-1]}


def test_two_vllm_judges_behind_the_gateway_score_as_each_server(
    script, reference, vllm_model_dir, second_model_dir
):
    gateway, direct = script
    rng = np.random.default_rng(7)
    images = [rng.integers(0, 256, (72, 56 + 8 * k, 3), dtype=np.uint8) for k in range(4)]
    pairs = [(images[0], images[1], "a fox"), (images[2], images[3], "a cat")]
    local = {JUDGES[0]: reference, JUDGES[1]: PacoReward.from_pretrained(second_model_dir)}
    listed = httpx.get(gateway + "/models").json()["data"]
    assert [entry["id"] for entry in listed] == list(JUDGES)
    got = {}
    for name, url in direct.items():
        got[name] = scores(gateway, name, pairs)
        print(
            f"\n{name}: through the gateway {got[name]}, in-process {local[name].score_pairs(pairs)}"
        )
        np.testing.assert_array_equal(got[name], scores(url, name, pairs))
        np.testing.assert_allclose(got[name], local[name].score_pairs(pairs), atol=EXACT)
        # vLLM's tokenizer routes, at the server root, by the body's model
        tokenize = {"model": name, "prompt": "Yes No", "add_special_tokens": False}
        answers = [
            httpx.post(u.removesuffix("/v1") + "/tokenize", json=tokenize) for u in (gateway, url)
        ]
        assert answers[0].status_code == 200 and answers[0].json() == answers[1].json()
        # a streamed answer: server-sent events, saying what the server says directly
        answer = streamed(gateway, name)
        assert answer["content-type"].startswith("text/event-stream") and answer["text"]
        assert answer["last"] == "data: [DONE]" and answer == streamed(url, name)
    assert np.abs(got[JUDGES[0]] - got[JUDGES[1]]).max() > 0.01  # two different judges
    health = httpx.get(gateway.removesuffix("/v1") + "/health").json()
    assert health["status"] == "ok" and set(health["upstreams"]) == set(JUDGES)
