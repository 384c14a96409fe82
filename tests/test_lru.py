"""Nothing grows per request: the one bounded LRU (``paco_reward.lru``) behind every
per-instruction cache of the backends (rendered prompts, prompt rows, grid inputs) and the
remote score cache, checked with 20,000 distinct instructions and with the tiny judges."""

from __future__ import annotations

import threading

import pytest

from paco_reward.errors import ConfigError
from paco_reward.lru import PER_INSTRUCTION_CACHE_SIZE, LRUCache


def test_twenty_thousand_distinct_keys_stay_at_the_bound():
    cache: LRUCache[str] = LRUCache(1024)
    for i in range(20_000):
        assert cache.get(f"instruction {i}", lambda i=i: f"prompt {i}") == f"prompt {i}"
        assert len(cache) <= 1024
    assert len(cache) == 1024
    # The survivors are the 1,024 most recent, in order of use.
    assert cache.keys() == [f"instruction {i}" for i in range(20_000 - 1024, 20_000)]
    assert cache.info() == {"hits": 0, "misses": 20_000, "size": 1024, "max_size": 1024}


def test_least_recently_used_goes_first_and_a_hit_refreshes():
    cache: LRUCache[int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.lookup("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert "b" not in cache and cache.lookup("a") == 1 and cache.lookup("c") == 3
    assert cache.lookup("b") is None
    made = []
    assert cache.get("a", lambda: made.append(1) or 9) == 1 and made == []


def test_size_zero_keeps_nothing_and_a_negative_size_is_refused():
    cache: LRUCache[int] = LRUCache(0)
    assert cache.get("a", lambda: 5) == 5 and len(cache) == 0
    with pytest.raises(ConfigError, match="max_size must be >= 0"):
        LRUCache(-1)


def test_concurrent_callers_compute_a_key_once_and_keep_the_bound():
    cache: LRUCache[int] = LRUCache(64)
    calls: list[int] = []

    def make(i: int) -> int:
        calls.append(i)
        return i * i

    def worker(offset: int) -> None:
        for i in range(500):
            assert cache.get(i % 100, lambda i=i: make(i % 100)) == (i % 100) ** 2

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 64
    info = cache.info()
    assert info["hits"] + info["misses"] == 8 * 500 == info["hits"] + len(calls)


def test_local_backend_prompt_and_row_caches_are_bounded(tiny_reward, random_images):
    backend = tiny_reward.backend
    n = PER_INSTRUCTION_CACHE_SIZE + 300
    first = backend.prompt_ids("instruction 0")
    for i in range(n):
        backend.prompt_ids(f"instruction {i}")
    assert len(backend._prompt_ids) == PER_INSTRUCTION_CACHE_SIZE
    # An evicted instruction renders again to the same ids.
    assert backend.prompt_ids("instruction 0") == first
    # Rows by (instruction, grids) are bounded too, and scoring still works after eviction.
    images = random_images(2)
    for i in range(backend.rows._cache.max_size + 10):
        backend.rows(f"row {i}", [(1, 4, 4), (1, 4, 4)])
    assert len(backend.rows._cache) == backend.rows._cache.max_size
    before = tiny_reward.score(images[0], images[1], "a cat")
    for i in range(PER_INSTRUCTION_CACHE_SIZE + 1):  # evicts the pair's prompt
        backend.prompt_ids(f"other {i}")
    assert tiny_reward.score(images[0], images[1], "a cat") == pytest.approx(before, abs=1e-6)


def test_processor_backend_prompt_caches_are_bounded(tiny_gemma3_dir, random_images):
    from paco_reward import PacoReward

    rm = PacoReward.from_pretrained(tiny_gemma3_dir)
    backend = rm.backend
    for i in range(PER_INSTRUCTION_CACHE_SIZE + 200):
        backend.prompt_text(f"instruction {i}")
    assert len(backend._prompts) == PER_INSTRUCTION_CACHE_SIZE
    images = random_images(2)
    backend._prompt_rows.max_size = 8  # the rows run the processor: keep this test fast
    for i in range(40):
        backend._rows(f"row {i}", images)
    assert len(backend._prompt_rows) == 8
