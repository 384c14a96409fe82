"""Benchmarks of paco-rl, each runnable as ``python -m benchmarks.<name>`` from the root of a
checkout (they are not in the wheel: several read the checkout's ``recipes/``).

- :mod:`benchmarks.consistency_rank`: ConsistencyRank (ranking agreement with people).
- :mod:`benchmarks.edit_reward_bench`: EditReward-Bench (pairwise editing preferences).
- :mod:`benchmarks.throughput`: scoring speed of the batched API vs the model card's loop;
  ``--engines``: transformers vs vLLM in-process vs vLLM servers (1 and 2 replicas).
- :mod:`benchmarks.server_throughput`: the reward server under concurrent clients.
- :mod:`benchmarks.grpo_step_cost`, :mod:`benchmarks.grpo_reward_overlap`,
  :mod:`benchmarks.grpo_kl_cost`: where a PaCo-GRPO epoch's time goes.
- :mod:`benchmarks.llamafactory_peer`: LLaMA-Factory trains on our export (``make
  llamafactory-check``).

Each ``main(argv)`` parses its arguments dataclass with
:func:`paco_reward.command_line.run_cli` (exit 0 / 1 one-line error / 2 usage).

Any object with ``score_pairs(pairs) -> np.ndarray`` can be benchmarked; on the
command line scorers are named by spec (see :mod:`benchmarks.common`).
"""
