"""The generators the recipes name, component by component, as their public configuration
files (no weights): what ``paco-grpo plan`` and ``benchmarks.gpu_check`` build on the meta
device. Each registered pipeline's spec (:class:`paco_grpo.pipelines.PipelineSpec`) says
which hub ids it ships and their files; a local pipeline folder's own configs win (see
:mod:`paco_reward.architectures`). ``published_sizes.json`` gives each file's published
parameter count and its source (``tests/test_architectures.py`` checks the file against it):
a new model's architecture files add their entries there.

    >>> from paco_grpo.architectures import pipeline_configs
    >>> sorted(pipeline_configs("black-forest-labs/FLUX.1-dev"))
    ['text_encoder', 'text_encoder_2', 'transformer', 'vae']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paco_reward.architectures import SHIPPED as REWARD_SHIPPED
from paco_reward.architectures import ArchitectureError, shipped_config

__all__ = ["pipeline_configs", "shipped_pipelines"]

SHIPPED = Path(__file__).parent


def shipped_pipelines() -> dict[str, dict[str, str]]:
    """Hub id -> component -> shipped configuration file, of every registered pipeline.

    Example:
        >>> shipped_pipelines()["Qwen/Qwen-Image"]["text_encoder"]
        'reward:qwen2_5_vl_7b.json'
    """
    from paco_grpo.pipelines import PIPELINE_SPECS

    return {
        hub_id: dict(files)
        for spec in PIPELINE_SPECS.values()
        for hub_id, files in spec.architectures.items()
    }


def _shipped(file: str) -> dict[str, Any]:
    if file.startswith("reward:"):
        return shipped_config(file.removeprefix("reward:"), REWARD_SHIPPED)
    return shipped_config(file, SHIPPED)


def pipeline_configs(name_or_path: str | Path) -> dict[str, dict[str, Any]]:
    """Component name -> configuration of the pipeline ``name_or_path``: the subfolders'
    ``config.json`` of a local diffusers folder (those ``model_index.json`` lists), else the
    shipped files of a known hub id. Tokenizers and schedulers have no weights and are left out.

    Raises:
        ArchitectureError: naming the pipeline, when neither exists.
    """
    folder = Path(name_or_path)
    if (folder / "model_index.json").is_file():
        index = json.loads((folder / "model_index.json").read_text())
        return {
            name: json.loads((folder / name / "config.json").read_text())
            for name in index
            if not name.startswith("_") and (folder / name / "config.json").is_file()
        }
    shipped = shipped_pipelines()
    if str(name_or_path) in shipped:
        return {name: _shipped(file) for name, file in shipped[str(name_or_path)].items()}
    raise ArchitectureError(
        f"no architecture for the pipeline {str(name_or_path)!r}: it is not a local diffusers "
        f"folder (model_index.json), and the shipped ones are {sorted(shipped)}. Pass the "
        "local folder (its config files are enough; no weights are read)."
    )
