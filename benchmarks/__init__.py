"""Benchmarks of paco-rl, each runnable as ``python -m benchmarks.<name>``.

- :mod:`benchmarks.consistency_rank`: ConsistencyRank (ranking agreement with people).
- :mod:`benchmarks.edit_reward_bench`: EditReward-Bench (pairwise editing preferences).
- :mod:`benchmarks.throughput`: scoring speed of the batched API vs the model card's loop;
  ``--engines``: transformers vs vLLM in-process vs vLLM servers (1 and 2 replicas).

Any object with ``score_pairs(pairs) -> np.ndarray`` can be benchmarked; on the
command line scorers are named by spec (see :mod:`benchmarks.common`).
"""
