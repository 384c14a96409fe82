"""data_pipeline: build the PaCo pairwise consistency dataset by sub-figure pairing.

Stages (each a function and a ``paco-data <step>`` command, each resumable):
prompts -> grids -> instances -> rankings -> pairs -> reasons -> export -> stats.

The names below are the package's public API; each is imported on first use, so importing
``data_pipeline`` (or a light module of it) loads neither torch nor diffusers. The annotation
app is :mod:`data_pipeline.annotate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from paco_reward.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from data_pipeline.export import ExportConfig, export_dataset
    from data_pipeline.generate import generate_grids, ingest_grids
    from data_pipeline.instances import PairingConfig, build_instances
    from data_pipeline.pairs import LabelRule, build_pairs, rankings_to_pairs, read_edit_pairs
    from data_pipeline.pipeline import (
        SyntheticConfig,
        make_synthetic_inputs,
        run_oracle_annotated,
        run_synthetic,
        simulate_rankings,
        truth_pairs,
    )
    from data_pipeline.probe import leakage_probe
    from data_pipeline.prompts import prepare_prompts
    from data_pipeline.rankings import ingest_rankings
    from data_pipeline.reasons import (
        OpenAITeacher,
        TemplateReasoner,
        annotate_reasons,
        attribute_comparison,
    )
    from data_pipeline.stats import write_stats
    from data_pipeline.storage import DataPipelineError
    from data_pipeline.synthetic import SyntheticWorld
    from data_pipeline.world_oracle import grid_consistency, prompt_alignment, read_panel

# name -> the module that defines it, imported when the name is first used
_LAZY = {
    "prepare_prompts": "data_pipeline.prompts",
    "generate_grids": "data_pipeline.generate",
    "ingest_grids": "data_pipeline.generate",
    "PairingConfig": "data_pipeline.instances",
    "build_instances": "data_pipeline.instances",
    "ingest_rankings": "data_pipeline.rankings",
    "LabelRule": "data_pipeline.pairs",
    "build_pairs": "data_pipeline.pairs",
    "rankings_to_pairs": "data_pipeline.pairs",
    "read_edit_pairs": "data_pipeline.pairs",
    "OpenAITeacher": "data_pipeline.reasons",
    "TemplateReasoner": "data_pipeline.reasons",
    "annotate_reasons": "data_pipeline.reasons",
    "attribute_comparison": "data_pipeline.reasons",
    "ExportConfig": "data_pipeline.export",
    "export_dataset": "data_pipeline.export",
    "write_stats": "data_pipeline.stats",
    "leakage_probe": "data_pipeline.probe",
    "SyntheticConfig": "data_pipeline.pipeline",
    "make_synthetic_inputs": "data_pipeline.pipeline",
    "run_oracle_annotated": "data_pipeline.pipeline",
    "run_synthetic": "data_pipeline.pipeline",
    "simulate_rankings": "data_pipeline.pipeline",
    "truth_pairs": "data_pipeline.pipeline",
    "SyntheticWorld": "data_pipeline.synthetic",
    "grid_consistency": "data_pipeline.world_oracle",
    "prompt_alignment": "data_pipeline.world_oracle",
    "read_panel": "data_pipeline.world_oracle",
    "DataPipelineError": "data_pipeline.storage",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = [
    "DataPipelineError",
    "ExportConfig",
    "LabelRule",
    "OpenAITeacher",
    "PairingConfig",
    "SyntheticConfig",
    "SyntheticWorld",
    "TemplateReasoner",
    "annotate_reasons",
    "attribute_comparison",
    "build_instances",
    "build_pairs",
    "export_dataset",
    "generate_grids",
    "grid_consistency",
    "ingest_grids",
    "ingest_rankings",
    "leakage_probe",
    "make_synthetic_inputs",
    "prepare_prompts",
    "prompt_alignment",
    "rankings_to_pairs",
    "read_edit_pairs",
    "read_panel",
    "run_oracle_annotated",
    "run_synthetic",
    "simulate_rankings",
    "truth_pairs",
    "write_stats",
]
