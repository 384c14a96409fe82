"""One bounded, thread-safe least-recently-used cache for everything the scorers keep per
request (rendered prompts, prompt rows, grid inputs, remote scores).

A server sees every distinct instruction its clients send; a plain ``dict`` keyed by them
grows for the life of the process. :class:`LRUCache` holds at most ``max_size`` entries and
drops the least recently used one first, as :func:`functools.lru_cache` does, but per
instance (a backend's cache dies with the backend) and with a ``make`` callback, hit/miss
counters and an explicit ``put`` for values that are only sometimes worth keeping.

    >>> cache = LRUCache(2)
    >>> cache.get("a", lambda: 1), cache.get("b", lambda: 2), cache.get("a", lambda: 0)
    (1, 2, 1)
    >>> cache.get("c", lambda: 3)  # evicts "b", the least recently used
    3
    >>> sorted(cache.keys()), len(cache), cache.info()["hits"]
    (['a', 'c'], 2, 1)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from paco_reward.errors import ConfigError

__all__ = ["LRUCache", "PER_INSTRUCTION_CACHE_SIZE"]

V = TypeVar("V")
# Distinct instructions a backend keeps rendered prompts for: training and benchmarks use a
# handful of templates, a server sees whatever its clients send (up to 16 KiB each).
PER_INSTRUCTION_CACHE_SIZE = 1024
_MISSING = object()


class LRUCache(Generic[V]):
    """A map of at most ``max_size`` entries that evicts the least recently used one
    (``max_size=0`` keeps nothing). Safe for concurrent callers: ``get(key, make)`` runs
    ``make`` under the lock, so two threads asking for one key compute it once.

    Args:
        max_size: the bound (entries, not bytes).

    Example:
        >>> cache = LRUCache(max_size=1)
        >>> cache.put("x", 1.0); cache.put("y", 2.0); cache.lookup("x") is None
        True
    """

    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ConfigError(f"max_size must be >= 0, got {max_size}; use 0 to disable the cache.")
        self.max_size = int(max_size)
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` (and kept) when absent."""
        with self._lock:
            value = self._items.get(key, _MISSING)
            if value is not _MISSING:
                self._items.move_to_end(key)
                self.hits += 1
                return value  # type: ignore[return-value]
            self.misses += 1
            value = make()
            self._store(key, value)
            return value

    def lookup(self, key: Hashable) -> V | None:
        """The value of ``key`` (marked recently used), or ``None`` when absent."""
        with self._lock:
            value = self._items.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value  # type: ignore[return-value]

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` under ``key`` (evicting the least recently used entry when full)."""
        with self._lock:
            self._store(key, value)

    def _store(self, key: Hashable, value: V) -> None:
        if self.max_size == 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first (a copy)."""
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._items.clear()

    def info(self) -> dict[str, Any]:
        """``hits``, ``misses``, ``size`` and ``max_size``."""
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "size": len(self._items),
                "max_size": self.max_size,
            }

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items
