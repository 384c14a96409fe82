"""Real vLLM replicas: the GRPO consistency reward scored through vLLM, and a replica
killed (SIGKILL, engine included) in the middle of a run."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import torch
from peer_settings import EXACT, SERVED_NAME

from paco_grpo.rewards.consistency import ConsistencyReward
from paco_reward import PacoReward
from paco_reward.testing.vllm_server import VLLMServer


def test_grpo_consistency_reward_through_vllm(vllm_server, reference):
    """The reward a GRPO trainer computes, through vLLM (one URL or a list) = in-process."""
    generator = torch.Generator().manual_seed(0)
    grids = [torch.rand(3, 224, 224, generator=generator) for _ in range(3)]
    prompts = [f"a {animal} in four seasons, 2x2 grid" for animal in ("fox", "owl", "cat")]
    metadata = [{"layout": "2x2"}] * 3
    expected = ConsistencyReward(reference)(grids, prompts, metadata)
    for server_url in (vllm_server.base_url, [vllm_server.base_url]):
        reward = ConsistencyReward(SERVED_NAME, server_url=server_url, cache_size=0)
        np.testing.assert_allclose(reward(grids, prompts, metadata), expected, atol=EXACT)
        awaited = asyncio.run(reward.acall(grids, prompts, metadata))
        np.testing.assert_allclose(awaited, expected, atol=EXACT)
        assert reward.num_failed == 0


@pytest.mark.slow
def test_replica_killed_mid_run(vllm_server, vllm_model_dir, reference, tmp_path):
    """Two vLLM servers; the second is SIGKILLed while requests are in flight: the run
    finishes on the first with the right scores, and the dead one gets nothing more."""
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, (96, 80 + 8 * k, 3), dtype=np.uint8) for k in range(12)]
    pairs = [(images[i % 12], images[(5 * i + 1) % 12], f"theme {i}") for i in range(72)]
    expected = reference.score_pairs(pairs)
    with VLLMServer(vllm_model_dir, SERVED_NAME, log_path=tmp_path / "second.log") as second:
        rm = PacoReward.from_server(
            [vllm_server.base_url, second.base_url],
            SERVED_NAME,
            cache_size=0,
            max_concurrency=4,
            retries=2,
            replica_cooldown=600,
            seed=0,
        )
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["scores"] = rm.score_pairs(pairs)
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = err

        def sent_to(url: str) -> int:
            return next(r["sent"] for r in rm.backend.replica_info() if r["url"] == url)

        before = sent_to(second.base_url)  # the set-up's requests (/models, /tokenize)
        runner = threading.Thread(target=run)
        runner.start()
        deadline = time.monotonic() + 120
        while sent_to(second.base_url) < before + 8 and time.monotonic() < deadline:
            time.sleep(0.005)
        at_kill = rm.backend.replica_info()
        second.kill()
        assert runner.is_alive(), "the run finished before the kill; the test proves nothing"
        print(f"\nreplicas at the kill: {at_kill}")
        runner.join(timeout=300)
        assert "error" not in outcome, outcome.get("error")
        np.testing.assert_allclose(outcome["scores"], expected, rtol=0, atol=EXACT)
        info = {r["url"]: r for r in rm.backend.replica_info()}
        assert info[second.base_url]["down"] and info[second.base_url]["failures"] >= 1
        # the first replica took over the rest of the run
        assert info[vllm_server.base_url]["sent"] - at_kill[0]["sent"] > 72 / 2, info
        dead_sent = info[second.base_url]["sent"]
        again = rm.score_pairs(pairs[:8])
        np.testing.assert_allclose(again, expected[:8], rtol=0, atol=EXACT)
        assert sent_to(second.base_url) == dead_sent  # nothing more to the dead replica
        print(f"\nreplicas after the kill: {rm.backend.replica_info()}")
