"""``recipes/serve_rewards.sh`` run as its comment documents, with two models and without vLLM:
one ``paco-reward serve`` process holds both behind one port, each scoring as in-process by
its name, and SIGTERM stops it. Its vLLM path (a vLLM server per model behind the gateway)
runs in tests/vllm_peer/test_vllm_gateway.py."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from paco_reward import PacoReward
from tests.serve_rewards_script import serve_rewards

TOL = 1e-4  # in-process vs served, as tests/server/test_server_http.py


@pytest.mark.slow
def test_two_models_behind_one_port_without_vllm(
    tiny_model_dir, tiny_qwen3_vl_dir, random_images, tmp_path
):
    models = {"judge-qwen2.5-vl": tiny_model_dir, "judge-qwen3-vl": tiny_qwen3_vl_dir}
    images = random_images(4, size=(64, 48), seed=51)
    pairs = [(images[0], images[1], "a fox"), (images[2], images[3], "a cat")]
    # GPUS empty: no GPU pinning, the CPU here
    variables = {"GPUS": "", "DTYPE": "float32", "SERVER": "paco"}
    with serve_rewards(models, tmp_path / "script.log", timeout=180, **variables) as base_url:
        listed = [e["id"] for e in httpx.get(base_url + "/models").json()["data"]]
        assert listed == list(models)
        for name, folder in models.items():
            remote = PacoReward.from_server(base_url, name, retries=0)
            try:
                served = remote.score_pairs(pairs)
            finally:
                remote.backend.close()
            local = PacoReward.from_pretrained(folder).score_pairs(pairs)
            np.testing.assert_allclose(served, local, atol=TOL)
