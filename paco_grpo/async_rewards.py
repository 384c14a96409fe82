"""Reward overlap: score one sampling batch while the next one is sampled.

:class:`AsyncRewardRunner` owns an asyncio event loop in a background thread. The trainer
hands it each sampling batch (:meth:`AsyncRewardRunner.submit`) and goes on sampling; the
loop awaits every reward's ``acall`` concurrently (a reward served by ``paco-reward serve``
or vLLM awaits its HTTP requests; an in-process reward runs in a worker thread, where
torch releases the GIL), and the trainer collects the results, in submission order, when
it needs them for the advantages. Only the time it then spends blocked counts as reward
time of the step (``time/reward_wait``).

Guarantees (tested): the scores equal the synchronous :func:`compute_rewards` exactly and
keep the batch order; one reward is never called concurrently with itself (calls to it
run in submission order), so a reward needs no thread safety of its own; an exception in
a reward re-raises in the trainer thread (at the next :meth:`~AsyncRewardRunner.raise_if_failed`
or when its batch is collected) with a note naming the reward; NaN items pass through and
are counted by the trainer.

Devices: a new thread's current CUDA device is GPU 0, whatever the process's is. Rewards
keep their own device with its index (``cuda:3``) and move their inputs there; for a
library that uses the current device instead, ``AsyncRewardRunner(rewards, device=...)``
makes that CUDA device current in the loop thread and in every worker thread the rewards
run in (nothing is set for a CPU device or ``None``).

    >>> import numpy as np
    >>> ones = lambda images, prompts, metadata: np.ones(len(images))
    >>> with AsyncRewardRunner({"ones": ones}) as runner:
    ...     future = runner.submit([0, 1], ["a", "b"], [{}, {}])
    ...     future.result().scores["ones"]
    array([1., 1.])
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from paco_grpo.rewards import Reward, acall_reward, check_scores
from paco_reward.devices import resolve_device
from paco_reward.errors import InputError, UsageError

logger = logging.getLogger(__name__)

__all__ = ["AsyncRewardRunner", "RewardBatch", "compute_rewards", "thread_cuda_device"]


@dataclass(frozen=True)
class RewardBatch:
    """The rewards of one sampling batch.

    Attributes:
        scores: ``{name: (n,) float64}`` (NaN for failed items).
        seconds: wall time of the batch's slowest reward (the rewards of a batch run
            concurrently when asynchronous, one after the other when synchronous).
    """

    scores: dict[str, np.ndarray]
    seconds: float


def thread_cuda_device(device: torch.device | None) -> torch.device | None:
    """The CUDA device a reward thread makes current for ``device``, or ``None`` to set none:
    ``None``, a CPU (or other non-CUDA) device, or a machine without CUDA sets nothing.

    Example:
        >>> thread_cuda_device(torch.device("cpu")) is None
        True
    """
    if device is None or device.type != "cuda" or not torch.cuda.is_available():
        return None
    return device


def _bind_thread(device: torch.device | None) -> None:
    """Make ``device`` the calling thread's current CUDA device (see :func:`thread_cuda_device`).

    The current device is per thread: this runs at the start of the runner's loop thread and
    of each of its worker threads. (The CUDA branch runs on GPU machines only; on CPU the
    tests check the decision and, with ``set_device`` recorded, that each thread makes it.)
    """
    target = thread_cuda_device(device)
    if target is not None:
        torch.cuda.set_device(target)


def _annotate(err: BaseException, name: str) -> None:
    err.add_note(f"(raised by the reward {name!r} while scoring a sampling batch)")


def compute_rewards(
    rewards: dict[str, Reward], images: Sequence, prompts: Sequence[str], metadata: Sequence[dict]
) -> RewardBatch:
    """Run each reward on one batch in this thread (the synchronous path).

    Raises:
        ValueError: a reward returned the wrong shape.

    Example:
        >>> import numpy as np
        >>> compute_rewards({"one": lambda i, p, m: np.ones(len(i))}, [0], ["a"], [{}]).scores
        {'one': array([1.])}
    """
    t0 = time.perf_counter()
    out = {}
    for name, reward in rewards.items():
        try:
            scores = reward(images, prompts, metadata)
        except Exception as err:
            _annotate(err, name)
            raise
        out[name] = check_scores(name, scores, len(images))
    return RewardBatch(out, time.perf_counter() - t0)


class AsyncRewardRunner:
    """Scores batches on a background event loop while the caller keeps working.

    Args:
        rewards: ``{name: reward}``; rewards with an ``acall`` are awaited, plain callables
            run in a worker thread.
        device: keyword-only; this process's device (the trainer passes
            ``accelerator.device``). When it is a CUDA device (and CUDA is available) the
            loop thread and every worker thread make it their current CUDA device, so a
            reward that relies on the current device lands on it too; a bare ``"cuda"`` is
            this process's GPU. ``None`` (default) or a CPU device: nothing is set.

    Use as a context manager (or call :meth:`close`); the thread is a daemon either way.

    Example:
        >>> runner = AsyncRewardRunner(rewards, device=accelerator.device)  # doctest: +SKIP
        >>> futures = [runner.submit(imgs, prompts, meta) for ...]          # doctest: +SKIP
        >>> batches = [f.result() for f in futures]                         # doctest: +SKIP
    """

    def __init__(
        self, rewards: dict[str, Reward], *, device: str | torch.device | None = None
    ) -> None:
        self.rewards = dict(rewards)
        self.device = resolve_device(device) if device is not None else None
        target = thread_cuda_device(self.device)
        if target is not None and not 0 <= (target.index or 0) < torch.cuda.device_count():
            # checked here: set_device failing in the loop thread would leave it dead
            raise InputError(
                f"AsyncRewardRunner device={device!r} is not a GPU of this process "
                f"({torch.cuda.device_count()} visible); pass accelerator.device."
            )
        self._loop = asyncio.new_event_loop()
        # asyncio.to_thread (in-process rewards) runs in the loop's default executor: its
        # threads make the device current as they start
        self._loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(
                thread_name_prefix="paco-grpo-reward",
                initializer=_bind_thread,
                initargs=(self.device,),
            )
        )
        self._thread = threading.Thread(target=self._run, name="paco-grpo-rewards", daemon=True)
        self._futures: list[concurrent.futures.Future] = []
        self._locks: dict[str, asyncio.Lock] = {}
        self._closed = False
        self._thread.start()

    def _run(self) -> None:
        _bind_thread(self.device)
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    # ------------------------------------------------------------------ scoring
    async def _one(self, name: str, reward, images, prompts, metadata) -> tuple[np.ndarray, float]:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:  # FIFO: calls to one reward run one at a time, in submission order
            t0 = time.perf_counter()
            try:
                scores = await acall_reward(reward, images, prompts, metadata)
            except Exception as err:
                _annotate(err, name)
                raise
            seconds = time.perf_counter() - t0
        return check_scores(name, scores, len(images)), seconds

    async def _batch(self, images, prompts, metadata) -> RewardBatch:
        names = list(self.rewards)
        results = await asyncio.gather(
            *(self._one(n, self.rewards[n], images, prompts, metadata) for n in names)
        )
        # the rewards of a batch run concurrently: its cost is the slowest one's (queueing
        # behind the previous batch of the same reward is not counted)
        seconds = max((s for _, s in results), default=0.0)
        return RewardBatch({n: r for n, (r, _) in zip(names, results)}, seconds)

    def submit(
        self, images: Sequence, prompts: Sequence[str], metadata: Sequence[dict]
    ) -> concurrent.futures.Future:
        """Start scoring one batch; returns a future of its :class:`RewardBatch`.

        The caller must not modify ``images`` or ``metadata`` until the future is done.
        """
        if self._closed:
            raise UsageError("AsyncRewardRunner is closed; create a new one.")
        future = asyncio.run_coroutine_threadsafe(
            self._batch(list(images), list(prompts), list(metadata)), self._loop
        )
        self._futures.append(future)
        return future

    def raise_if_failed(self) -> None:
        """Re-raise (in the calling thread) the exception of any finished batch that failed."""
        for future in self._futures:
            if future.done() and not future.cancelled() and future.exception() is not None:
                raise future.exception()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Cancel unfinished batches, stop the loop and join its thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for future in self._futures:
            future.cancel()
        try:
            asyncio.run_coroutine_threadsafe(
                self._loop.shutdown_default_executor(), self._loop
            ).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> AsyncRewardRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
