"""Benchmarks: human alignment (ConsistencyRank, EditReward-Bench) and speed. Run as ``python -m benchmarks.<name>``."""
