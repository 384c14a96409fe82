"""Stage 2: grids. Ingest a folder of generated grids or generate them with any
diffusers text-to-image pipeline, then cut every grid into panels.

Folder layout read by :func:`ingest_grids` (the one generation writes)::

    grids_dir/<prompt_id>/<seed>.png

Outputs in the work folder: ``grids.jsonl`` (one row per grid) and
``panels/<prompt_id>/<seed>_<pos>.png`` + ``panels.jsonl`` (row-major positions).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PIL import Image
from tqdm.auto import tqdm

from data_pipeline.prompts import read_prompts
from data_pipeline.storage import DataPipelineError, read_jsonl, save_image_atomic, write_jsonl
from paco_reward.errors import InputError
from paco_reward.grids import split_grid
from paco_reward.images import load_image

logger = logging.getLogger(__name__)

GRIDS_FILE = "grids.jsonl"
PANELS_FILE = "panels.jsonl"


def _cut(work_dir: Path, prompt: dict, grid: str, image: Image.Image) -> list[dict]:
    panels = split_grid(image, prompt["rows"], prompt["cols"], name=f"{prompt['prompt_id']}/{grid}")
    rows = []
    for pos, panel in enumerate(panels):
        rel = Path("panels") / prompt["prompt_id"] / f"{grid}_{pos}.png"
        if not (work_dir / rel).is_file():
            save_image_atomic(panel, work_dir / rel)
        rows.append({"prompt_id": prompt["prompt_id"], "grid": grid, "pos": pos, "path": str(rel)})
    return rows


def _write_manifests(work_dir: Path, grids: list[dict], panels: list[dict]) -> None:
    write_jsonl(work_dir / GRIDS_FILE, grids)
    write_jsonl(work_dir / PANELS_FILE, panels)
    logger.info("grids: %d grids, %d panels in %s", len(grids), len(panels), work_dir)


def ingest_grids(grids_dir: str | Path, work_dir: str | Path, *, min_grids: int = 2) -> Path:
    """Stage 2 (ingest): read ``grids_dir/<prompt_id>/<seed>.png`` for every prompt in
    ``<work_dir>/prompts.jsonl``, cut the panels, write the manifests.

    Prompts with fewer than ``min_grids`` grids are skipped with a warning (pairing
    needs at least two grids). Panels already cut are kept (resumable).

    Raises:
        DataPipelineError: if no prompt has enough grids.
        LayoutError / InvalidImageError: a grid that does not fit its layout or is unreadable.
    """
    grids_dir, work_dir = Path(grids_dir), Path(work_dir)
    prompts = read_prompts(work_dir)
    grids: list[dict] = []
    panels: list[dict] = []
    for prompt_id, prompt in tqdm(prompts.items(), desc="ingest grids", leave=False):
        files = sorted((grids_dir / prompt_id).glob("*.png"), key=lambda p: _seed_key(p.stem))
        if len(files) < min_grids:
            logger.warning(
                "prompt %r: %d grid(s) in %s (< min_grids=%d); skipped.",
                prompt_id,
                len(files),
                grids_dir / prompt_id,
                min_grids,
            )
            continue
        for path in files:
            image = load_image(path, name=str(path))
            grids.append(_grid_row(prompt, path.stem, path, image))
            panels.extend(_cut(work_dir, prompt, path.stem, image))
    if not grids:
        raise DataPipelineError(
            f"No prompt of {work_dir / 'prompts.jsonl'} has >= {min_grids} grids under "
            f"{grids_dir}; expected files like {grids_dir}/<prompt_id>/<seed>.png."
        )
    _write_manifests(work_dir, grids, panels)
    return work_dir / PANELS_FILE


def _seed_key(stem: str) -> tuple[int, Any]:
    return (0, int(stem)) if stem.isdigit() else (1, stem)


def _grid_row(prompt: dict, grid: str, path: Path, image: Image.Image) -> dict:
    return {
        "prompt_id": prompt["prompt_id"],
        "grid": grid,
        "path": str(path),
        "rows": prompt["rows"],
        "cols": prompt["cols"],
        "width": image.width,
        "height": image.height,
    }


def generate_grids(
    pipe: Any,
    work_dir: str | Path,
    *,
    seeds: list[int] | tuple[int, ...] = (0, 1, 2, 3),
    height: int | None = None,
    width: int | None = None,
    prompt_field: str = "prompt",
    **pipe_kwargs: Any,
) -> Path:
    """Stage 2 (generate): run a diffusers text-to-image pipeline once per prompt and
    seed, save ``<work_dir>/grids/<prompt_id>/<seed>.png``, cut the panels.

    Any pipeline called as ``pipe(prompt=..., height=..., width=..., generator=...)``
    returning ``.images`` works (``FluxPipeline`` for the paper's FLUX.1-dev). Grids that
    exist are not generated again, so a killed run resumes where it stopped.

    Args:
        pipe: the diffusers pipeline.
        seeds: one grid per seed and prompt (the paper uses 4).
        height / width: grid size; default the record's ``height``/``width``.
        prompt_field: record field sent as the prompt (``"prompt"`` = the full grid prompt).
        **pipe_kwargs: passed to the pipeline (``num_inference_steps``, ``guidance_scale``...).

    Example:
        >>> from diffusers import FluxPipeline                      # doctest: +SKIP
        >>> pipe = FluxPipeline.from_pretrained("black-forest-labs/FLUX.1-dev")  # doctest: +SKIP
        >>> generate_grids(pipe, "work", seeds=[0, 1, 2, 3], num_inference_steps=28)  # doctest: +SKIP
    """
    import torch

    if len(seeds) < 2:
        raise InputError(f"seeds must name >= 2 grids per prompt for pairing; got {list(seeds)}.")
    work_dir = Path(work_dir)
    prompts = read_prompts(work_dir)
    grids: list[dict] = []
    panels: list[dict] = []
    device = getattr(pipe, "device", "cpu")
    for prompt_id, prompt in tqdm(prompts.items(), desc="generate grids", leave=False):
        for seed in seeds:
            path = work_dir / "grids" / prompt_id / f"{seed}.png"
            if path.is_file():
                image = load_image(path, name=str(path))
            else:
                generator = torch.Generator(device=device).manual_seed(int(seed))
                image = pipe(
                    prompt=prompt[prompt_field],
                    height=height or prompt.get("height"),
                    width=width or prompt.get("width"),
                    generator=generator,
                    **pipe_kwargs,
                ).images[0]
                image = load_image(image, name=f"{prompt_id}/{seed}")
                save_image_atomic(image, path)
            grids.append(_grid_row(prompt, str(seed), path, image))
            panels.extend(_cut(work_dir, prompt, str(seed), image))
    _write_manifests(work_dir, grids, panels)
    return work_dir / PANELS_FILE


def read_panels(work_dir: str | Path) -> list[dict]:
    """The panel manifest written by stage 2."""
    return read_jsonl(Path(work_dir) / PANELS_FILE)
