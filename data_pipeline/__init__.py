"""data_pipeline: build the PaCo pairwise consistency dataset by sub-figure pairing.

Stages (each a function and a ``paco-data <step>`` command, each resumable):
prompts -> grids -> instances -> rankings -> pairs -> reasons -> export -> stats.
"""

# paco_reward.reward imports data_pipeline.grids, and data_pipeline.grids imports
# paco_reward.errors: initialise paco_reward first so either import order works.
import paco_reward  # noqa: F401  isort: skip
