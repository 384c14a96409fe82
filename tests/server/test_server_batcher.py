"""The micro-batcher: concurrent jobs share one model call, results go back to the right
caller, and one failing request does not fail the others that shared its batch."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from paco_reward.images import resize_for_model
from paco_reward.server.batcher import MicroBatcher, ServerOverloadedError


class PoisonedBackend:
    """The real tiny backend, except that a pair whose instruction is "poison" raises
    (a stand-in for a request that passes validation but breaks the model call)."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def score_batch(self, images, pairs):
        if any(text == "poison" for _, _, text in pairs):
            raise ValueError("poisoned pair")
        return self.backend.score_batch(images, pairs)


def test_jobs_are_merged_and_failures_isolated(tiny_reward, random_images):
    backend = tiny_reward.backend
    images = [resize_for_model(x, backend.image_policy) for x in random_images(6, seed=21)]
    jobs = [([images[k], images[k + 1]], [(0, 1, f"theme {k}")]) for k in range(5)]
    jobs.append(([images[0], images[5]], [(0, 1, "poison")]))
    expected = [backend.score_batch(imgs, pairs)[0] for imgs, pairs in jobs[:5]]

    async def main():
        batcher = MicroBatcher(PoisonedBackend(backend), max_batch_size=16, max_wait_ms=200)
        await batcher.start()
        try:
            results = await asyncio.gather(
                *(batcher.score(imgs, pairs) for imgs, pairs in jobs), return_exceptions=True
            )
            # equal images across jobs are encoded once: 6 distinct images, 6 pairs
            return results, batcher.stats.as_dict()
        finally:
            await batcher.stop()

    results, stats = asyncio.run(main())
    assert isinstance(results[-1], ValueError) and "poisoned" in str(results[-1])
    np.testing.assert_allclose([r[0] for r in results[:5]], expected, atol=1e-5)
    assert stats["largest_batch"] == 6  # all six jobs went into one merged call first


def test_queue_limit_answers_overloaded(tiny_reward, random_images):
    images = random_images(2, seed=22)

    async def main():
        batcher = MicroBatcher(tiny_reward.backend, max_queue=2)
        await batcher.start()
        try:
            with pytest.raises(ServerOverloadedError, match="limit 2"):
                await batcher.score(images, [(0, 1, "a")] * 3)
        finally:
            await batcher.stop()

    asyncio.run(main())
