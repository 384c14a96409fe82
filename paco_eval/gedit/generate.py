"""GEdit-Bench's generate stage: edits from any registered editing pipeline, in the official
layout, sharded over processes and resumable.

Any :data:`paco_grpo.pipelines.PIPELINE_SPECS` entry with ``edits=True`` (``flux_kontext``,
``qwen_image_edit``, ``qwen_image_edit_plus``) loads through its diffusers class, optionally
with a LoRA: a folder or file ``load_lora_weights`` reads, which is what a GRPO run's
checkpoint folder holds (``pytorch_lora_weights.safetensors``). Each row's edit is sampled by
the pipeline's own ``__call__`` (deterministic ODE sampling) with a generator seeded from
``seed`` and the row's index, so a shard, a re-run or another process count gives the same
image. Files are written atomically; an edit already on disk is skipped (a corrupt one is
written again). ``<root>/<model>/generation.json`` records the settings; a re-run with other
settings into the same folder raises instead of mixing two runs.

    >>> rows = select_rows(load_rows("tests/data/gedit_ref"), languages=["en"], limit=2)  # doctest: +SKIP
    >>> generate_edits(rows, "results", "tiny", pipeline="flux_kontext",
    ...                model_name_or_path="tiny_kontext", num_inference_steps=2)        # doctest: +SKIP
    {'written': 2, 'skipped': 0, 'shard': [0, 1]}
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paco_eval.gedit.data import GEditRow, edit_path, open_image, source_path
from paco_eval.generation import check_manifest, load_pipeline, png_bytes, readable_image
from paco_reward.atomic_io import atomic_write_bytes
from paco_reward.errors import InputError

__all__ = ["generate_edits", "load_editor"]

logger = logging.getLogger(__name__)


def load_editor(
    pipeline: str,
    model_name_or_path: str,
    *,
    lora: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
):
    """The diffusers pipeline of a registered editing generator, with ``lora`` loaded
    (:func:`paco_eval.generation.load_pipeline`).

    Raises:
        InputError: ``pipeline`` is not registered or does not edit.
    """
    return load_pipeline(pipeline, model_name_or_path, lora=lora, device=device, dtype=dtype, edits=True)


def generate_edits(
    rows: Sequence[GEditRow],
    output_root: str | Path,
    model: str,
    *,
    pipe: Any = None,
    pipeline: str | None = None,
    model_name_or_path: str | None = None,
    lora: str | None = None,
    num_inference_steps: int = 28,
    seed: int = 0,
    shard_index: int = 0,
    num_shards: int = 1,
    device: str = "cpu",
    dtype: str = "float32",
    pipeline_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``<root>/<model>/fullset/<task>/<lang>/<key>.png`` and ``<key>_SRCIMG.png`` for
    this shard's rows (``row.index % num_shards == shard_index``).

    Args:
        rows: the rows to edit (:func:`paco_eval.gedit.data.select_rows`).
        output_root: the results root; ``model`` is the folder under it.
        pipe: an already loaded pipeline (else ``pipeline`` + ``model_name_or_path`` + ``lora``
            are loaded with :func:`load_editor`).
        num_inference_steps: sampling steps (the recipe's ``test.num_steps``).
        seed: base seed; row ``i`` samples with ``seed + i``.
        pipeline_kwargs: extra call arguments (``guidance_scale``, ``true_cfg_scale``,
            ``height``/``width``, ``max_area``, ``max_sequence_length``, ...).

    Returns:
        ``{"written", "skipped", "shard"}``.

    Raises:
        InputError: a bad shard.
        GenerationSettingsError: settings that differ from the folder's ``generation.json``
            (an ``InputError``).
    """
    import torch

    if not 0 <= shard_index < num_shards:
        raise InputError(f"shard_index must be in [0, {num_shards}); got {shard_index}.")
    mine = [r for r in rows if r.index % num_shards == shard_index]  # by row index: stable
    settings = {
        "pipeline": pipeline,
        "model_name_or_path": model_name_or_path,
        "lora": lora,
        "num_inference_steps": num_inference_steps,
        "seed": seed,
        "dtype": dtype,
        "pipeline_kwargs": pipeline_kwargs or {},
    }
    check_manifest(Path(output_root) / model, settings)
    todo = [r for r in mine if not readable_image(edit_path(output_root, model, r))]
    if todo and pipe is None:
        if pipeline is None or model_name_or_path is None:
            raise InputError("give pipe= or both pipeline= and model_name_or_path=.")
        pipe = load_editor(pipeline, model_name_or_path, lora=lora, device=device, dtype=dtype)
    for row in todo:
        given = open_image(row.source, f"source of {row.item_id}")  # SRCIMG: as the data has it
        generator = torch.Generator("cpu").manual_seed(seed + row.index)
        image = pipe(
            image=given.convert("RGB"),
            prompt=row.instruction,
            num_inference_steps=num_inference_steps,
            generator=generator,
            **(pipeline_kwargs or {}),
        ).images[0]
        dest = edit_path(output_root, model, row)
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(source_path(output_root, model, row), png_bytes(given))
        atomic_write_bytes(dest, png_bytes(image))  # the edit last: its presence marks the row done
        logger.info("edited %s", row.item_id)
    return {
        "written": len(todo),
        "skipped": len(mine) - len(todo),
        "shard": [shard_index, num_shards],
    }
