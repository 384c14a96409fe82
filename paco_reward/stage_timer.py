"""Where a scoring call spends its time: host preprocessing, the vision tower, the language model.

:class:`~paco_reward.local_backend.LocalBackend` times its stages into a :class:`StageTimer`
when one is set on it (``backend.stage_timer = StageTimer(device)``; ``None``, the default,
costs nothing). Device stages are timed with CUDA events on a GPU, so the timing adds no
synchronisation to the call: the events are read afterwards, in :meth:`StageTimer.totals`.
On the CPU they are wall-clock times. Host stages (the preprocessing, which runs in a worker
thread beside the model's work) are wall-clock times everywhere.

    >>> timer = StageTimer(torch.device("cpu"))
    >>> with timer.device_stage("vision"):
    ...     _ = torch.ones(4) * 2
    >>> sorted(timer.totals())
    ['vision']
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["StageTimer"]


class StageTimer:
    """Seconds per stage, summed over the calls since the last :meth:`totals`."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._seconds: defaultdict[str, float] = defaultdict(float)
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._lock = threading.Lock()

    @contextmanager
    def host_stage(self, name: str) -> Iterator[None]:
        """Wall-clock time of host work (thread-safe: the preprocessing worker uses it)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self._seconds[name] += time.perf_counter() - start

    @contextmanager
    def device_stage(self, name: str) -> Iterator[None]:
        """The device time of the work queued inside (CUDA events), or wall clock on a CPU."""
        if not self.cuda:
            with self.host_stage(name):
                yield
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        try:
            yield
        finally:
            end.record()
            self._events.append((name, start, end))

    def totals(self) -> dict[str, float]:
        """Seconds per stage since the last call (waits for the recorded events), then resets."""
        for name, start, end in self._events:
            end.synchronize()
            self._seconds[name] += start.elapsed_time(end) / 1000.0
        with self._lock:
            totals = dict(self._seconds)
            self._seconds.clear()
        self._events.clear()
        return totals
