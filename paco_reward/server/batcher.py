"""Micro-batching: concurrent requests are merged into one ``LocalBackend`` call.

Every request puts a job on an asyncio queue and awaits its future. One worker
task takes the first waiting job, keeps collecting jobs until ``max_batch_size``
pairs are gathered or ``max_wait_ms`` has passed, merges their images (equal
images, by content hash, are encoded once) and runs the model in a single
dedicated thread, so the event loop keeps accepting requests while the model
works, and the next batch forms meanwhile. All model calls (scoring, first-token
log-probabilities, generation) go through that one thread, so the model is
never used from two threads at once.

    >>> batcher = MicroBatcher(backend, max_batch_size=32, max_wait_ms=5)   # doctest: +SKIP
    >>> await batcher.score(images, [(0, 1, instruction)])                   # doctest: +SKIP
    array([0.42])
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from paco_reward.errors import ServerOverloadedError
from paco_reward.images import image_hash
from paco_reward.local_backend import PairRequest
from paco_reward.yes_no import yes_probability

logger = logging.getLogger(__name__)


@dataclass
class FirstToken:
    """First-answer-token statistics of one pair: the score from the full distribution,
    the greedy token id, the top-k and the requested token ids' log-probabilities."""

    score: float
    greedy_id: int
    greedy_logprob: float
    top: list[tuple[int, float]]
    requested: list[tuple[int, float]]


@dataclass
class _Job:
    kind: str  # "score" | "first_token"
    images: list[Image.Image]
    hashes: list[str]
    pairs: list[PairRequest]
    future: asyncio.Future
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class BatchStats:
    batches: int = 0
    pairs: int = 0
    largest_batch: int = 0
    busy_seconds: float = 0.0

    def as_dict(self) -> dict[str, float]:
        mean = self.pairs / self.batches if self.batches else 0.0
        return {
            "batches": self.batches,
            "pairs": self.pairs,
            "mean_batch_size": round(mean, 3),
            "largest_batch": self.largest_batch,
            "busy_seconds": round(self.busy_seconds, 3),
        }


def first_token_logprobs(
    backend, images: Sequence[Image.Image], pairs: Sequence[PairRequest]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-softmax of the first answer token ``[len(pairs), vocab]`` and the scores
    (:func:`~paco_reward.yes_no.yes_probability` on the same logits), through
    ``LocalBackend.first_token_outputs``: the path ``score_batch`` takes, keeping the full
    distribution."""

    def both(logits: torch.Tensor) -> torch.Tensor:
        scores = yes_probability(logits, tokens=backend.yes_no)
        return torch.cat([torch.log_softmax(logits.float(), dim=-1), scores[:, None]], dim=-1)

    out = backend.first_token_outputs(images, pairs, both)
    return out[:, :-1], out[:, -1].double()


class MicroBatcher:
    """Merges concurrent scoring requests into batches for one ``LocalBackend``.

    Args:
        backend: a :class:`~paco_reward.local_backend.LocalBackend`.
        max_batch_size: most pairs per model call (a larger single request runs alone).
        max_wait_ms: longest the first job of a batch waits for company.
        max_queue: pairs allowed to wait; beyond it :class:`ServerOverloadedError`.
    """

    def __init__(
        self, backend, max_batch_size: int = 32, max_wait_ms: float = 5.0, max_queue: int = 4096
    ) -> None:
        self.backend = backend
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Job] | None = None
        self._queued_pairs = 0
        self._worker: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="paco-model")
        self._worker = asyncio.create_task(self._run(), name="paco-micro-batcher")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        while self._queue is not None and not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(ServerOverloadedError("server is shutting down"))
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    @property
    def queued_pairs(self) -> int:
        return self._queued_pairs

    # ------------------------------------------------------------------ public
    async def score(self, images: list[Image.Image], pairs: list[PairRequest]) -> np.ndarray:
        """Scores of ``pairs`` (indices into ``images``) through ``backend.score_batch``."""
        return await self._submit("score", images, pairs)

    async def first_token(
        self,
        images: list[Image.Image],
        pairs: list[PairRequest],
        top_k: int = 0,
        token_ids: Sequence[int] = (),
    ) -> list[FirstToken]:
        """Score, greedy token, top-k and requested-id log-probabilities of each pair."""
        return await self._submit(
            "first_token", images, pairs, {"top_k": top_k, "token_ids": list(token_ids)}
        )

    async def call(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """Run any other model call (e.g. generation) on the model thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    # ------------------------------------------------------------------ internals
    async def _submit(self, kind: str, images, pairs, options=None):
        if self._queue is None or self._worker is None or self._worker.done():
            raise ServerOverloadedError(
                "the micro-batcher is not running (server starting or stopping)."
            )
        if self._queued_pairs + len(pairs) > self.max_queue:
            raise ServerOverloadedError(
                f"{self._queued_pairs} pairs are waiting (limit {self.max_queue}); retry later."
            )
        future = asyncio.get_running_loop().create_future()
        hashes = [image_hash(img) for img in images]
        self._queued_pairs += len(pairs)
        await self._queue.put(_Job(kind, images, hashes, list(pairs), future, options or {}))
        return await future

    async def _collect(self) -> list[_Job]:
        assert self._queue is not None
        jobs = [await self._queue.get()]
        size = len(jobs[0].pairs)
        deadline = time.monotonic() + self.max_wait
        while size < self.max_batch_size:
            if self._queue.empty():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            else:
                job = self._queue.get_nowait()
            jobs.append(job)
            size += len(job.pairs)
        return jobs

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect()
            for kind in ("score", "first_token"):
                group = [job for job in jobs if job.kind == kind and not job.future.cancelled()]
                if not group:
                    continue
                started = time.perf_counter()
                results = await self._run_isolating_failures(loop, kind, group)
                self.stats.busy_seconds += time.perf_counter() - started
                for job, result in zip(group, results):
                    if job.future.done():
                        continue
                    if isinstance(result, Exception):
                        job.future.set_exception(result)
                    else:
                        job.future.set_result(result)
            for job in jobs:
                self._queued_pairs -= len(job.pairs)

    async def _run_isolating_failures(self, loop, kind: str, group: list[_Job]) -> list[Any]:
        """Run a merged batch; if it fails, run its jobs one by one so that one bad request
        fails alone instead of failing every request that shared its batch."""
        try:
            return await loop.run_in_executor(self._executor, self._run_group, kind, group)
        except Exception as err:  # noqa: BLE001 - handed to the waiting requests
            if len(group) == 1:
                logger.exception("model call failed for one request")
                return [err]
            logger.warning(
                "batch of %d requests failed (%r); retrying them one by one", len(group), err
            )
        results: list[Any] = []
        for job in group:
            results += await self._run_isolating_failures(loop, kind, [job])
        return results

    def _run_group(self, kind: str, jobs: list[_Job]) -> list[Any]:
        """Merge the jobs' images and pairs, run one model call, split the results."""
        images: list[Image.Image] = []
        index_of: dict[str, int] = {}
        pairs: list[PairRequest] = []
        for job in jobs:
            remap = []
            for image, key in zip(job.images, job.hashes):
                if key not in index_of:
                    index_of[key] = len(images)
                    images.append(image)
                remap.append(index_of[key])
            pairs += [(remap[a], remap[b], text) for a, b, text in job.pairs]
        self.stats.batches += 1
        self.stats.pairs += len(pairs)
        self.stats.largest_batch = max(self.stats.largest_batch, len(pairs))
        if kind == "score":
            flat = np.asarray(self.backend.score_batch(images, pairs), dtype=np.float64)
        else:
            flat = self._first_tokens(images, pairs, jobs)
        results, start = [], 0
        for job in jobs:
            results.append(flat[start : start + len(job.pairs)])
            start += len(job.pairs)
        return results

    def _first_tokens(self, images, pairs, jobs) -> list[FirstToken]:
        logprobs, scores = first_token_logprobs(self.backend, images, pairs)
        options = [job.options for job in jobs for _ in job.pairs]
        out = []
        for row, score, opts in zip(logprobs, scores.tolist(), options):
            greedy_logprob, greedy_id = row.max(dim=-1)
            top_k = min(opts["top_k"], row.numel())
            values, ids = row.topk(top_k) if top_k else (row[:0], row[:0].long())
            ids_req = opts["token_ids"]
            out.append(
                FirstToken(
                    score=float(score),
                    greedy_id=int(greedy_id),
                    greedy_logprob=float(greedy_logprob),
                    top=list(zip(ids.tolist(), values.tolist())),
                    requested=[(i, float(row[i])) for i in ids_req],
                )
            )
        return out
