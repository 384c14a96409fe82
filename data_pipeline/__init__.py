"""data_pipeline: build the PaCo pairwise consistency dataset by sub-figure pairing.

Stages (each a function and a ``paco-data <step>`` command, each resumable):
prompts -> grids -> instances -> rankings -> pairs -> reasons -> export -> stats.
"""
