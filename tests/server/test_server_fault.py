"""Fault tolerance: kill -9 the server in the middle of a run. A client without enough
retries raises (never returns a made-up score); a patient client keeps retrying with
back-off and finishes with the right scores once the server is restarted."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from paco_reward import PacoReward, RewardServerError
from paco_reward.server import ServerProcess


@pytest.mark.slow
def test_kill_mid_run_then_restart(tiny_model_dir, tiny_reward, random_images):
    images = random_images(10, seed=12)
    pairs = [(images[i % 10], images[(i * 3 + 1) % 10], f"theme {i}") for i in range(30)]
    expected = tiny_reward.score_pairs(pairs)
    server = ServerProcess(tiny_model_dir, args=["--served-model-name", "tiny"]).start()
    try:
        patient = PacoReward.from_server(
            server.base_url,
            "tiny",
            retries=240,  # ~2 minutes of back-off: a restart is slow on a loaded 2-core machine
            backoff=0.1,
            max_backoff=0.5,
            cache_size=0,
            max_concurrency=2,
            seed=0,
        )
        impatient = PacoReward.from_server(
            server.base_url, "tiny", retries=1, backoff=0.05, cache_size=0, seed=0
        )
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["scores"] = patient.score_pairs(pairs)
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = err

        runner = threading.Thread(target=run)
        runner.start()
        deadline = time.monotonic() + 60
        while patient.backend.requests_sent < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill()  # mid-run: requests are in flight or queued
        assert runner.is_alive(), "the run finished before the kill; the test proves nothing"

        with pytest.raises(RewardServerError, match=r"after 2 attempts: (ConnectError|ReadError)"):
            impatient.score_pairs(pairs[:3])
        assert impatient.backend.cache_info()["size"] == 0

        server.start()  # same port
        runner.join(timeout=120)
        assert "error" not in outcome, outcome.get("error")
        assert patient.backend.retries_done > 0
        print(f"\nretries during the outage: {patient.backend.retries_done}")
        np.testing.assert_allclose(outcome["scores"], expected, atol=1e-4)
        # and the restarted server serves new requests as before
        assert impatient.score(*pairs[0]) == pytest.approx(expected[0], abs=1e-4)
    finally:
        server.stop()
