"""Peer tests against real vLLM (run by ``make test`` with ``.venv-vllm/bin/python``).

One stock vLLM server (``python -m vllm.entrypoints.openai.api_server``, 127.0.0.1) and one
in-process ``vllm.LLM`` serve the session, on a tiny Qwen2.5-VL whose heads vLLM's CPU
kernels accept (and, in one test, a tiny Qwen3-VL); the transformers backend on the same
folder is the reference.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")  # the engine stays on loopback

import vllm  # noqa: E402,F401 - fail loudly here if this venv has no vLLM
from peer_settings import LLM_KWARGS, SERVED_NAME  # noqa: E402

from paco_reward import PacoReward  # noqa: E402
from paco_reward.testing import build_tiny_qwen2_5_vl  # noqa: E402
from paco_reward.testing.vllm_server import VLLMServer  # noqa: E402


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory):
    """The tiny evaluator with 32-wide heads, widely spread weights (scores differ clearly
    between pairs) and a budget of 1 to 16 vision tokens per image (so image sizes matter)."""
    return build_tiny_qwen2_5_vl(
        tmp_path_factory.mktemp("tiny-vllm") / "model",
        seed=0,
        max_pixels=16 * 28 * 28,
        vllm_compatible=True,
        text_config={"initializer_range": 0.3},
        vision_config={"initializer_range": 0.3},
    )


@pytest.fixture(scope="session")
def reference(vllm_model_dir):
    """The transformers backend on the same folder: the numbers vLLM must reproduce."""
    return PacoReward.from_pretrained(vllm_model_dir)


@pytest.fixture(scope="session")
def vllm_server(vllm_model_dir, tmp_path_factory):
    """One stock vLLM server for the whole session."""
    log = tmp_path_factory.mktemp("vllm-logs") / "server.log"
    with VLLMServer(vllm_model_dir, SERVED_NAME, log_path=log) as server:
        yield server


@pytest.fixture(scope="session")
def vllm_inprocess(vllm_model_dir):
    """``PacoReward.from_pretrained(path, backend="vllm")``, built once."""
    rm = PacoReward.from_pretrained(vllm_model_dir, backend="vllm", **LLM_KWARGS)
    yield rm
    rm.backend.close()
