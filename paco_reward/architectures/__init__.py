"""The architectures of the models the recipes name, as their public configuration files
(no weights), so a plan or a GPU check can build them without a model hub.

A local folder's own ``config.json`` always wins (a fine-tuned checkpoint, a tiny test
model); a hub id falls back to the file shipped here. :func:`build_empty` builds the model
on the meta device through the class the trainer loads (``architectures`` of a transformers
config, ``_class_name`` of a diffusers one): shapes and parameter counts, no memory.

    >>> from paco_reward.architectures import build_empty, model_config
    >>> model = build_empty(model_config("X-GenGroup/PaCo-Reward-7B"))  # doctest: +SKIP
    >>> sum(p.numel() for p in model.parameters()) / 1e9                 # doctest: +SKIP
    8.29...
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from paco_reward.errors import ArchitectureError

__all__ = [
    "ArchitectureError",
    "LIBRARY_CLASSES",
    "MODELS",
    "build_empty",
    "default_dtype_set_to",
    "count_parameters",
    "model_config",
    "shipped_config",
]

SHIPPED = Path(__file__).parent

# Hub id -> shipped config file. The evaluator is Qwen2.5-VL-7B-Instruct fine-tuned, so its
# architecture is the base's; Qwen3-VL-8B-Instruct is the other evaluator base a recipe names
# (its published config.json); Gemma-3-4B-IT is the cross-family judge of the PaCo-GRPO guide
# (its published config.json); PickScore is a CLIP-ViT-H-14. GOT-OCR 2.0 (the ``ocr`` reward's
# reader): the converted checkpoint's text config (a Qwen2-0.5B decoder) with its vision tower
# written out; the published file leaves it at transformers' GotOcr2VisionConfig defaults
# (SAM ViT-B: 1024 px, 16 px patches, 12 layers of 768). DINOv3 ViT-L/16 (GARDO's image
# feature model, paco_grpo.features): its published config.json (24 layers of 1024, 16 heads,
# 4 register tokens, no key bias).
MODELS: dict[str, str] = {
    "Qwen/Qwen2.5-VL-7B-Instruct": "qwen2_5_vl_7b.json",
    "X-GenGroup/PaCo-Reward-7B": "qwen2_5_vl_7b.json",
    "Qwen/Qwen3-VL-8B-Instruct": "qwen3_vl_8b.json",
    "google/gemma-3-4b-it": "gemma3_4b_it.json",
    "laion/CLIP-ViT-H-14-laion2B-s32B-b79K": "clip_vit_h_14.json",
    "yuvalkirstain/PickScore_v1": "clip_vit_h_14.json",
    "stepfun-ai/GOT-OCR-2.0-hf": "got_ocr2.json",
    "zhiqiulin/clip-flant5-xxl": "clip_flant5_xxl.json",
    "openai/clip-vit-large-patch14": "clip_vit_l_14.json",
    "facebook/dinov3-vitl16-pretrain-lvd1689m": "dinov3_vitl16.json",
}

# Architectures whose class is this library's, not transformers' (name -> module). VQAScore's
# CLIP-FlanT5: google/flan-t5-xxl's published config, the vision fields t2v-metrics trains
# it with (ModelArguments: CLIP ViT-L/14-336, mlp2x_gelu, layer -2) and, written out for the
# meta device, the vision tower's own config (openai/clip-vit-large-patch14-336's).
LIBRARY_CLASSES: dict[str, str] = {
    "CLIPT5ForConditionalGeneration": "paco_reward.clip_t5",
}


def shipped_config(file: str, root: Path = SHIPPED) -> dict[str, Any]:
    """The shipped configuration ``file`` (under ``root``) as a dict."""
    return json.loads((root / file).read_text())


def model_config(
    name_or_path: str | Path, subfolder: str | None = None, known: dict[str, str] | None = None
) -> dict[str, Any]:
    """The configuration of ``name_or_path``: its folder's ``config.json`` where it is a local
    folder, else the shipped file of a known hub id (``known``, default :data:`MODELS`).

    Raises:
        ArchitectureError: naming the model, when neither exists.
    """
    folder = Path(name_or_path) / (subfolder or "")
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text())
    known = MODELS if known is None else known
    if str(name_or_path) in known:
        return shipped_config(known[str(name_or_path)])
    raise ArchitectureError(
        f"no architecture for {str(name_or_path)!r}: it is not a local folder with a "
        f"config.json, and the shipped ones are {sorted(known)}. Pass the local folder "
        "of the model (its config.json is enough; no weights are read)."
    )


def build_empty(config: dict[str, Any], dtype=None):
    """The model ``config`` describes, on the meta device (no memory, no weights), built
    through its own class: ``_class_name`` from diffusers, else ``architectures[0]`` from
    transformers; parameters in ``dtype`` (default: torch's, float32)."""
    import torch

    with torch.device("meta"), default_dtype_set_to(dtype or torch.get_default_dtype()):
        if "_class_name" in config:
            import diffusers

            cls = getattr(diffusers, config["_class_name"])
            return cls.from_config({k: v for k, v in config.items() if not k.startswith("_")})
        import importlib

        import transformers

        (name,) = config["architectures"][:1]
        if name in LIBRARY_CLASSES:  # importing it registers its config with AutoConfig
            cls = getattr(importlib.import_module(LIBRARY_CLASSES[name]), name)
        else:
            cls = getattr(transformers, name)
        hf_config = transformers.AutoConfig.for_model(**config)
        return cls._from_config(hf_config)


@contextlib.contextmanager
def default_dtype_set_to(dtype) -> Iterator[None]:
    """Parameters created inside are ``dtype`` from the start (no float32 copy first)."""
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def count_parameters(module) -> int:
    """Parameters of ``module``, each shared tensor counted once."""
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())
