"""The generators the recipes name, component by component, as their public configuration
files (no weights): what ``paco-grpo plan`` and ``benchmarks.gpu_check`` build on the meta
device. A local pipeline folder's own configs win (see :mod:`paco_reward.architectures`).

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

__all__ = ["PIPELINES", "pipeline_configs"]

SHIPPED = Path(__file__).parent

_FLUX1 = {
    "transformer": "flux1_transformer.json",
    "vae": "flux1_vae.json",
    "text_encoder": "clip_vit_l_14_text.json",
    "text_encoder_2": "t5_v1_1_xxl_encoder.json",
}
# Stable Diffusion 3.5 Large: CLIP-L and OpenCLIP bigG text towers with their projections, and
# the T5 v1.1 XXL encoder FLUX.1-dev also uses.
_SD35_LARGE = {
    "transformer": "sd35_large_transformer.json",
    "vae": "sd35_vae.json",
    "text_encoder": "clip_vit_l_14_text_projection.json",
    "text_encoder_2": "clip_vit_bigg_14_text_projection.json",
    "text_encoder_3": "t5_v1_1_xxl_encoder.json",
}
_FLUX2_KLEIN_4B = {
    "transformer": "flux2_klein_4b_transformer.json",
    "vae": "flux2_vae.json",
    "text_encoder": "qwen3_4b.json",
}
_QWEN_IMAGE = {
    "transformer": "qwen_image_transformer.json",
    "vae": "qwen_image_vae.json",
    "text_encoder": "reward:qwen2_5_vl_7b.json",
}
# Hub id -> component -> shipped file. FLUX.1-Kontext-dev has FLUX.1-dev's architecture (the
# reference image is more tokens, not more weights); Qwen-Image-Edit has Qwen-Image's (its
# text encoder sees the reference too), whose text encoder is Qwen2.5-VL-7B-Instruct, the
# evaluator's base (shipped with paco_reward).
PIPELINES: dict[str, dict[str, str]] = {
    "black-forest-labs/FLUX.1-dev": _FLUX1,
    "black-forest-labs/FLUX.1-Kontext-dev": _FLUX1,
    "Qwen/Qwen-Image": _QWEN_IMAGE,
    "Qwen/Qwen-Image-Edit": _QWEN_IMAGE,
    "stabilityai/stable-diffusion-3.5-large": _SD35_LARGE,
    # FLUX.2-dev: 32 B transformer, Mistral-Small-3.2-24B text encoder (with its vision tower).
    "black-forest-labs/FLUX.2-dev": {
        "transformer": "flux2_dev_transformer.json",
        "vae": "flux2_vae.json",
        "text_encoder": "mistral_small_3_2_24b.json",
    },
    # FLUX.2-klein 4B, step-distilled and base: one architecture, Qwen3-4B text encoder.
    "black-forest-labs/FLUX.2-klein-4B": _FLUX2_KLEIN_4B,
    "black-forest-labs/FLUX.2-klein-base-4B": _FLUX2_KLEIN_4B,
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
    if str(name_or_path) in PIPELINES:
        return {name: _shipped(file) for name, file in PIPELINES[str(name_or_path)].items()}
    raise ArchitectureError(
        f"no architecture for the pipeline {str(name_or_path)!r}: it is not a local diffusers "
        f"folder (model_index.json), and the shipped ones are {sorted(PIPELINES)}. Pass the "
        "local folder (its config files are enough; no weights are read)."
    )
