"""Load: 48 concurrent clients score single pairs for a bounded time; nothing fails, nothing
is dropped, the server merges their requests into batches, and the scores stay exact."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from paco_reward import PacoReward
from paco_reward.server import ServerConfig, ServerThread, create_app

CLIENTS = 48
SECONDS = 5.0


@pytest.mark.slow
def test_concurrent_clients_no_errors_no_drops(tiny_reward, random_images):
    images = random_images(16, seed=11)
    pool = [(images[i], images[(i * 5 + 3) % 16], f"theme {i % 3}") for i in range(16)]
    expected = tiny_reward.score_pairs(pool)
    app = create_app(tiny_reward.backend, ServerConfig("load", max_batch_size=32, max_wait_ms=5))
    with ServerThread(app) as server:
        # One client object per simulated client, cache off: every call is a real request.
        clients = [
            PacoReward.from_server(server.base_url, "load", cache_size=0, retries=0, timeout=60)
            for _ in range(CLIENTS)
        ]
        latencies: list[float] = []
        results: list[tuple[int, float]] = []
        errors: list[BaseException] = []
        sent = 0

        async def client(k: int, stop_at: float) -> None:
            nonlocal sent
            i = k
            while time.monotonic() < stop_at:
                a, b, theme = pool[i % len(pool)]
                sent += 1
                start = time.perf_counter()
                try:
                    score = await clients[k].ascore_pairs([(a, b, theme)])
                except Exception as err:  # noqa: BLE001 - counted and asserted below
                    errors.append(err)
                    continue
                latencies.append(time.perf_counter() - start)
                results.append((i % len(pool), float(score[0])))
                i += CLIENTS

        async def main() -> None:
            stop_at = time.monotonic() + SECONDS
            await asyncio.gather(*(client(k, stop_at) for k in range(CLIENTS)))

        start = time.perf_counter()
        asyncio.run(main())
        elapsed = time.perf_counter() - start
        stats = app.state.paco.model("load").batcher.stats.as_dict()
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    print(
        f"\n{CLIENTS} clients, {len(results)} requests in {elapsed:.1f}s "
        f"({len(results) / elapsed:.1f} pairs/s): p50 {p50:.0f} ms, p99 {p99:.0f} ms; "
        f"server batches: {stats}"
    )
    assert not errors, errors[:3]
    assert len(results) == sent >= CLIENTS  # every request answered
    assert stats["pairs"] == sent
    assert stats["mean_batch_size"] > 2  # concurrent single-pair requests were merged
    got = np.array([s for _, s in results])
    want = expected[[i for i, _ in results]]
    np.testing.assert_allclose(got, want, atol=1e-4)
