"""A model card (``README.md``) written next to trained weights: data, recipe, metrics.

>>> print(render_model_card(base_model="tiny", metrics={"eval_roc_auc": 1.0})[:30])
---
library_name: transformers
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paco_reward.atomic_io import atomic_write_text

_RECIPE_KEYS = (
    "model_name_or_path",
    "dataset_path",
    "use_lora",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "freeze_vision_tower",
    "freeze_merger",
    "first_token_weight",
    "loss_mode",
    "reasoning_warmup_steps",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "bf16",
    "image_min_pixels",
    "image_max_pixels",
    "seed",
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(getattr(value, "value", value))  # enums (e.g. the scheduler type) by value


def render_model_card(
    base_model: str,
    recipe: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    adapter: str | None = None,
    merged: bool = False,
    model_path: str | None = None,
) -> str:
    """Markdown text of the card (YAML front matter + sections). ``model_path`` is the folder
    the card describes (used in the usage snippet of a fully fine-tuned or merged model)."""
    kind = (
        "merged model"
        if merged
        else ("LoRA adapter" if adapter or (recipe or {}).get("use_lora") else "model")
    )
    lines = [
        "---",
        "library_name: transformers" if merged or not adapter else "library_name: peft",
        f"base_model: {base_model}",
        "tags: [paco-rl, reward-model, qwen2.5-vl, consistency]",
        "---",
        "",
        f"# PaCo-Reward evaluator ({kind})",
        "",
        "Pairwise visual-consistency evaluator (PaCo-RL, arXiv 2512.04784). Score of a pair = "
        "P(Yes) / (P(Yes) + P(No)) of the first answer token.",
        "",
        "```python",
        "from paco_reward import PacoReward",
        (
            f"rm = PacoReward.from_pretrained({base_model!r}, adapter={adapter!r})"
            if adapter and not merged
            else f"rm = PacoReward.from_pretrained({model_path or base_model!r})"
        ),
        "rm.score(image_a, image_b, 'theme')",
        "```",
    ]
    if data:
        lines += ["", "## Data", ""] + [f"- {k}: {_fmt(v)}" for k, v in data.items()]
    if recipe:
        lines += ["", "## Recipe", ""]
        lines += [f"- {k}: {_fmt(recipe[k])}" for k in _RECIPE_KEYS if k in recipe]
    if metrics:
        lines += ["", "## Held-out metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in metrics.items()]
    return "\n".join(lines) + "\n"


def write_model_card(output_dir: str | Path, **kwargs: Any) -> Path:
    """Write ``README.md`` (atomically) into ``output_dir``; kwargs as :func:`render_model_card`."""
    path = Path(output_dir) / "README.md"
    atomic_write_text(path, render_model_card(**kwargs))
    return path


def recipe_dict(config) -> dict[str, Any]:
    """The JSON-safe recipe fields of a :class:`PacoSFTConfig`."""
    out = {}
    for key in _RECIPE_KEYS:
        value = getattr(config, key, None)
        try:
            json.dumps(value)
        except TypeError:
            value = str(getattr(value, "value", value))
        out[key] = value
    return out
