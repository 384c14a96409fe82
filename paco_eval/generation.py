"""What the benchmarks' generate stages share: loading a registered pipeline with a LoRA,
the settings manifest of an output folder, this process's shard, atomic PNG files.

A generate stage (:mod:`paco_eval.t2is.generate`, :mod:`paco_eval.gedit.generate`) loads a
:data:`paco_grpo.pipelines.PIPELINE_SPECS` generator through its diffusers class
(:func:`load_pipeline`), takes the items ``r::world`` of process ``r`` (:func:`process_shard`,
from ``accelerate``'s state, so ``accelerate launch`` / ``torchrun`` shard it), skips those
whose files are already readable (:func:`readable_image`), and writes each file atomically.
``generation.json`` in the folder records the settings (:func:`check_manifest`); a re-run with
other settings raises :class:`~paco_eval.errors.GenerationSettingsError` instead of mixing two
runs in one folder.

    >>> settings = {"pipeline": "flux", "seed": 0}
    >>> import tempfile; folder = tempfile.mkdtemp()
    >>> check_manifest(folder, settings)            # first run: written
    >>> check_manifest(folder, settings)            # a re-run with the same settings: fine
    >>> check_manifest(folder, {"pipeline": "flux", "seed": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    paco_eval.errors.GenerationSettingsError: ...
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from paco_eval.errors import GenerationSettingsError
from paco_reward.atomic_io import atomic_write_text
from paco_reward.errors import ConfigError, InputError, PathNotFoundError

__all__ = [
    "DTYPES",
    "MANIFEST",
    "call_kwargs",
    "check_manifest",
    "load_pipeline",
    "png_bytes",
    "process_shard",
    "readable_image",
    "resolve_lora",
    "shard",
]

logger = logging.getLogger(__name__)

MANIFEST = "generation.json"
DTYPES = ("float32", "bfloat16", "float16")
# A manifest key not compared on a re-run: which library versions wrote the folder.
_INFO_KEY = "written_with"
_LORA_FILE = "pytorch_lora_weights.safetensors"  # what a paco-grpo checkpoint folder holds
T = TypeVar("T")


def resolve_lora(lora: str | None) -> str | None:
    """The LoRA ``load_lora_weights`` should read: a file, a folder holding
    ``pytorch_lora_weights.safetensors`` (a paco-grpo checkpoint), a GRPO run's output folder
    (its latest ``checkpoints/checkpoint-N``), or a hub id (passed on as given).

    Raises:
        PathNotFoundError: a run folder without checkpoints, or a folder without the adapter.
    """
    if not lora:
        return None
    path = Path(lora).expanduser()
    if path.is_file() or not path.exists():
        return str(lora)  # a file, or a hub id that diffusers resolves
    if (path / _LORA_FILE).is_file():
        return str(path)
    checkpoints = path / "checkpoints"
    if checkpoints.is_dir():
        numbered = [(int(m.group(1)), p) for p in checkpoints.iterdir()
                    if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)) and (p / _LORA_FILE).is_file()]  # fmt: skip
        if numbered:
            return str(max(numbered)[1])
    raise PathNotFoundError(
        f"--lora {str(lora)!r} is a folder without {_LORA_FILE} and without "
        "checkpoints/checkpoint-N holding one; pass the adapter file, a checkpoint folder or "
        "a GRPO run's output_dir."
    )


def load_pipeline(
    pipeline: str,
    model_name_or_path: str,
    *,
    lora: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    edits: bool | None = None,
):
    """The diffusers pipeline of a registered generator, with ``lora`` loaded.

    Args:
        pipeline: a :data:`paco_grpo.pipelines.PIPELINE_SPECS` name (``flux``, ``sd3``, ...).
        lora: what :func:`resolve_lora` accepts.
        edits: ``True`` / ``False`` requires an editing / a text-to-image pipeline.

    Raises:
        InputError: ``pipeline`` is not registered, or is not of the kind ``edits`` asks for.
        ConfigError: an unknown ``dtype``.
    """
    import diffusers
    import torch

    from paco_grpo.pipelines import get_pipeline_spec

    spec = get_pipeline_spec(pipeline)
    if edits is not None and spec.edits != edits:
        if edits:
            raise InputError(
                f"pipeline {pipeline!r} generates from text only; GEdit-Bench needs an editing "
                "pipeline (flux_kontext, qwen_image_edit, qwen_image_edit_plus)."
            )
        raise InputError(
            f"pipeline {pipeline!r} edits reference images; T2IS-Bench needs a text-to-image "
            "pipeline (flux, flux2, sd3, qwen_image, z_image, ...)."
        )
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {list(DTYPES)}; got {dtype!r}.")
    pipe = getattr(diffusers, spec.diffusers_class).from_pretrained(
        model_name_or_path, dtype=getattr(torch, dtype)
    )
    lora = resolve_lora(lora)
    if lora is not None:
        pipe.load_lora_weights(lora)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def call_kwargs(pipe: Any, **optional: Any) -> dict[str, Any]:
    """The ``optional`` call arguments ``pipe.__call__`` takes (``max_sequence_length``,
    ``true_cfg_scale``, ... differ between pipelines); ``None`` values are dropped."""
    params = inspect.signature(pipe.__call__).parameters
    return {k: v for k, v in optional.items() if v is not None and k in params}


def png_bytes(image) -> bytes:
    """``image`` (PIL) encoded as PNG, for :func:`paco_reward.atomic_io.atomic_write_bytes`."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def readable_image(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file that decodes as an image (a corrupt one is made again)."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        return False
    try:
        with Image.open(path) as image:
            image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return False
    return True


def shard(items: Sequence[T], index: int, count: int) -> list[T]:
    """Items ``index::count``: each item goes to exactly one of ``count`` processes.

    Raises:
        InputError: ``index`` is not in ``[0, count)``.
    """
    if count < 1 or not 0 <= index < count:
        raise InputError(f"shard_index must be in [0, {count}); got {index}.")
    return list(items[index::count])


def process_shard() -> tuple[int, int, str]:
    """``(process index, process count, device)`` of this process under ``accelerate launch``
    or ``torchrun`` (``(0, 1, its device)`` when run alone)."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    # accelerate's CPU launch sets ACCELERATE_USE_CPU; without cpu=True a torchrun-started
    # process on a machine without accelerators would not join the process group
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    return state.process_index, state.num_processes, str(state.device)


def check_manifest(
    folder: str | os.PathLike, settings: Mapping[str, Any], *, info: Mapping[str, Any] | None = None
) -> None:
    """Write ``folder/generation.json`` (``settings`` and ``info``), or check that the one there
    holds the same ``settings`` (``info``, e.g. library versions, is not compared).

    Raises:
        GenerationSettingsError: the folder holds files made with other settings (both named).
    """
    folder = Path(folder)
    manifest = folder / MANIFEST
    settings = json.loads(json.dumps(dict(settings)))  # tuples -> lists, as read back
    if manifest.is_file():
        try:
            old = json.loads(manifest.read_text(encoding="utf-8"))
        except ValueError as err:
            raise GenerationSettingsError(f"{manifest} is not valid JSON ({err}); delete it to start over.",
                                          path=str(manifest)) from None  # fmt: skip
        old = {k: v for k, v in old.items() if k != _INFO_KEY}
        if old != settings:
            differ = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise GenerationSettingsError(
                f"{folder} holds images made with other settings ({', '.join(f'{k}: {old.get(k)!r}' for k in differ)}); "
                f"this run's are ({', '.join(f'{k}: {settings.get(k)!r}' for k in differ)}). Write to "
                "another folder, or delete it to start over.",
                path=str(manifest), differ=differ,
            )  # fmt: skip
        return
    folder.mkdir(parents=True, exist_ok=True)
    payload = settings | ({_INFO_KEY: dict(info)} if info else {})
    atomic_write_text(manifest, json.dumps(payload, indent=1, sort_keys=True) + "\n")
