"""The arguments of each ``paco-data`` stage: a dataclass per command, whose fields are its
flags (:mod:`paco_reward.command_line`). A stage with a config of its own (``PairingConfig``,
``LabelRule``, ``ExportConfig``, ``SyntheticConfig``) takes it whole by subclassing and adds
only the work folder and its files; :func:`config_part` gives the stage its config back.

    >>> from paco_reward.command_line import parse_config
    >>> args = parse_config(InstancesArguments, ["work", "--rule", "same_position"])
    >>> config_part(args, PairingConfig)
    PairingConfig(rule='same_position', min_candidates=2, max_candidates=None, seed=0, shuffle_candidates=False)
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Literal, TypeVar

from data_pipeline.export import ExportConfig
from data_pipeline.instances import PairingConfig
from data_pipeline.pairs import LabelRule
from data_pipeline.pipeline import SyntheticConfig
from data_pipeline.reasons import OpenAITeacher, aannotate_reasons
from paco_reward.command_line import config_field
from paco_reward.errors import ConfigError

__all__ = [
    "ExportArguments",
    "GridsArguments",
    "InstancesArguments",
    "PairsArguments",
    "ProbeArguments",
    "PromptsArguments",
    "RankingsArguments",
    "ReasonsArguments",
    "SimulateArguments",
    "StatsArguments",
    "SyntheticArguments",
    "WorkFolder",
    "config_part",
]

C = TypeVar("C")


def config_part(args, cls: type[C]) -> C:
    """The ``cls`` config held by a command's arguments (a subclass adding IO fields), so
    that what a stage records (``asdict``) is its own config and nothing else."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init})


def _default(func, name: str):
    """The default of ``func``'s parameter ``name`` (one place for it, not two)."""
    return inspect.signature(func).parameters[name].default


@dataclass(kw_only=True)
class WorkFolder:
    """The pipeline's work folder, the first argument of every stage."""

    work_dir: str = config_field(help="The pipeline's work folder.", positional=True)


@dataclass(kw_only=True)
class PromptsArguments(WorkFolder):
    """Stage 1: read T2IS-style prompts."""

    input: str = config_field(help="T2IS-style prompt JSONL.")
    limit: int | None = config_field(None, help="Keep the first N prompts.")
    source: str = config_field("t2is", help="Source tag of the prompts.")


@dataclass(kw_only=True)
class GridsArguments(WorkFolder):
    """Stage 2: ingest grids from a folder, or generate them with a diffusers pipeline."""

    from_dir: str | None = config_field(
        None, help="Folder of <prompt_id>/<seed>.png grids to ingest (or give --pipeline)."
    )
    min_grids: int = config_field(2, help="Skip prompts with fewer grids (ingesting).")
    pipeline: str | None = config_field(
        None, help="Diffusers pipeline folder or id to generate with (or give --from_dir)."
    )
    seeds: list[int] = config_field(lambda: [0, 1, 2, 3], help="One grid per seed and prompt.")
    steps: int = config_field(28, help="num_inference_steps of the pipeline.")
    guidance_scale: float = config_field(3.5, help="guidance_scale of the pipeline.")
    max_sequence_length: int | None = config_field(
        None, help="max_sequence_length of the pipeline (default: the pipeline's)."
    )
    height: int | None = config_field(None, help="Grid height (default: the prompt record's).")
    width: int | None = config_field(None, help="Grid width (default: the prompt record's).")
    dtype: Literal["float32", "bfloat16", "float16"] = config_field(
        "float32", help="torch dtype the pipeline runs in."
    )
    device: str | None = config_field(None, help="torch device (default: cuda if available).")

    def __post_init__(self) -> None:
        if (self.from_dir is None) == (self.pipeline is None):
            raise ConfigError("grids: give exactly one of --from_dir GRIDS_DIR or --pipeline DIR.")


@dataclass(kw_only=True)
class InstancesArguments(WorkFolder, PairingConfig):
    """Stage 3: ranking instances by sub-figure pairing."""


@dataclass(kw_only=True)
class RankingsArguments(WorkFolder):
    """Stage 4: ingest and merge rankings."""

    rankings: list[str] = config_field(
        list,
        help="Ranking JSONL file(s); the work folder's annotations.jsonl is always merged too.",
        positional=True,
        nargs="*",
    )
    method: Literal["borda", "majority"] = config_field(
        "borda", help="How the rankings of one instance merge: Borda count or pairwise majority."
    )


@dataclass(kw_only=True)
class PairsArguments(WorkFolder, LabelRule):
    """Stage 5: rankings -> Yes/No pairs."""

    edit_pairs: str | None = config_field(None, help="Editing pairs JSONL to add.")


@dataclass(kw_only=True)
class ReasonsArguments(WorkFolder):
    """Stage 6: a teacher's reason for every pair (defaults: those of OpenAITeacher and
    annotate_reasons)."""

    teacher: Literal["template", "openai"] = config_field(
        "template",
        help="'openai': any OpenAI-compatible endpoint; 'template': the synthetic world's "
        "attribute comparison (synthetic work folders only).",
    )
    base_url: str | None = config_field(
        None, help="OpenAI-compatible endpoint, e.g. http://host:8000/v1 (--teacher openai)."
    )
    model: str | None = config_field(None, help="Model name served by the endpoint.")
    api_key_env: str = config_field(
        "OPENAI_API_KEY", help="Environment variable holding the key ('EMPTY' if unset)."
    )
    max_tokens: int = config_field(
        _default(OpenAITeacher, "max_tokens"), help="Longest reason asked."
    )
    temperature: float = config_field(
        _default(OpenAITeacher, "temperature"), help="Sampling temperature of the teacher."
    )
    timeout: float = config_field(
        _default(OpenAITeacher, "timeout"), help="Seconds before a request is abandoned."
    )
    concurrency: int = config_field(
        _default(aannotate_reasons, "concurrency"), help="At most this many requests in flight."
    )
    max_attempts: int = config_field(
        _default(aannotate_reasons, "max_attempts"),
        help="Tries per pair (errors and rejected reasons both count).",
    )
    backoff_s: float = config_field(
        _default(aannotate_reasons, "backoff_s"), help="First back-off delay (s) between tries."
    )
    progress: bool = config_field(True, help="Show a progress bar (--no_progress hides it).")

    def __post_init__(self) -> None:
        if self.teacher == "openai" and not (self.base_url and self.model):
            raise ConfigError("reasons: --teacher openai needs --base_url and --model.")


@dataclass(kw_only=True)
class ExportArguments(WorkFolder, ExportConfig):
    """Stage 7: DatasetDict, parquet, LLaMA-Factory, ConsistencyRank."""

    out: str | None = config_field(None, help="Export folder (default WORK/export).")


@dataclass(kw_only=True)
class StatsArguments(WorkFolder):
    """Stage 8: statistics (JSON + table)."""

    export_dir: str | None = config_field(None, help="Export folder (default WORK/export).")


@dataclass(kw_only=True)
class ProbeArguments(WorkFolder):
    """Label-leakage probe of the exported dataset (test AUCs)."""

    dataset: str | None = config_field(None, help="Saved DatasetDict (default WORK/export/hf).")


@dataclass(kw_only=True)
class SyntheticArguments(WorkFolder, SyntheticConfig):
    """The synthetic world's size and noise (SYNTHETIC data)."""

    overwrite_output_dir: bool = config_field(
        False,
        help="Empty a work folder made for another synthetic world first (without it such a "
        "folder is refused; the same world resumes).",
    )


@dataclass(kw_only=True)
class SimulateArguments(WorkFolder):
    """Rankings by simulated annotators (SYNTHETIC)."""

    out: str | None = config_field(
        None, help="Rankings JSONL to write (default WORK/inputs/rankings.jsonl)."
    )
