"""``paco-eval t2is generate``: each case's grid from a registered text-to-image pipeline,
cut into the benchmark's sub-images, sharded over processes and resumable.

``T2IS-Bench.json`` has no grid prompt; PaCo-RL's copy of the benchmark
(``dataset/T2IS/all/test_metadata.jsonl`` of X-GenGroup/PaCo-RL, 596 lines: ``original_idx`` =
case id, ``prompt`` = the "N-PANEL Images with a RxC grid layout ..." prompt, ``height`` /
``width`` of the grid, ``layout``) is what the paper generates from; ``--prompts`` names it.

Each selected case is drawn once, by the pipeline's own ``__call__`` (deterministic ODE
sampling) with a CPU generator seeded ``seed + case number`` (``0006_0012`` -> 60012), so a
shard, a re-run or another process count gives the same images. The grid is cut row-major by
the case's layout (:func:`paco_reward.grids.split_grid`) into ``<images_dir>/<case_id>_<k:04d>.png``,
each written atomically. Under ``accelerate launch`` (or ``torchrun``) process ``r`` of ``N``
draws the cases ``r::N`` of the selection. A case is done when all its sub-images decode; a
killed run re-run draws only the cases that are not (a corrupt file is drawn again).
``<images_dir>/generation.json`` records the settings; a re-run with other settings into the
same folder raises :class:`~paco_eval.errors.GenerationSettingsError`.

Grid size: ``grid_size: case`` (default) draws the case's ``height x width`` (512-px panels:
1024x1024 for 2x2, 512x1536 for 1x3, ...) scaled by ``resolution / 1024``, so the default
``resolution: 1024`` is the paper's 1024-px 2x2 grid; ``grid_size: square`` draws every layout at
``resolution x resolution``, as PaCo-RL's trainer's test pass does (``item_resolution_overrides``
off).

    accelerate launch --num_processes 8 -m paco_eval t2is generate --data ChengyouJia/T2IS-Bench \\
        --prompts test_metadata.jsonl --images_dir out/images --lora runs/flux_t2is
"""

from __future__ import annotations

import json
import logging
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paco_eval.errors import ImageCountError, UnknownItemError
from paco_eval.generation import (
    DTYPES,
    call_kwargs,
    check_manifest,
    load_pipeline,
    png_bytes,
    process_shard,
    readable_image,
    shard,
)
from paco_eval.harness import library_versions
from paco_eval.t2is.data import T2ISBench, T2ISCase
from paco_reward.atomic_io import atomic_write_bytes
from paco_reward.errors import ConfigError, InputError, LayoutError, PathNotFoundError
from paco_reward.grids import parse_layout, split_grid

__all__ = ["GRID_SIZES", "GridJob", "case_seed", "grid_shape", "load_prompts", "plan_jobs", "run_generate"]

logger = logging.getLogger(__name__)

GRID_SIZES = ("case", "square")
# PaCo-RL's metadata sizes grids for 1024-px evaluation (512-px panels); sides are kept
# multiples of 16 (the VAE's 8x and FLUX's 2x2 latent packing) and split evenly.
_REFERENCE_RESOLUTION = 1024
_MULTIPLE = 16


@dataclass(frozen=True)
class GridPrompt:
    """A case's line of PaCo-RL's metadata: the grid prompt and the grid it describes."""

    prompt: str
    layout: str | None
    height: int | None
    width: int | None


@dataclass(frozen=True)
class GridJob:
    """One case to draw: its prompt, grid shape (rows, cols), grid size and seed."""

    case_id: str
    prompt: str
    rows: int
    cols: int
    height: int
    width: int
    seed: int

    def paths(self, images_dir: str | os.PathLike) -> list[Path]:
        return [Path(images_dir) / f"{self.case_id}_{k:04d}.png" for k in range(self.rows * self.cols)]


def load_prompts(path: str | os.PathLike) -> dict[str, GridPrompt]:
    """``{case id: GridPrompt}`` from PaCo-RL's T2IS metadata JSONL (``original_idx``,
    ``prompt``, optional ``layout`` / ``height`` / ``width``).

    Raises:
        PathNotFoundError: ``path`` is empty or does not exist.
        InputError: a line that is not a JSON object with ``original_idx`` and ``prompt``
            (named by file and line).
    """
    if not path or not Path(path).is_file():
        raise PathNotFoundError(
            f"--prompts {str(path)!r} is not a file: T2IS-Bench.json holds no grid prompts; pass "
            "PaCo-RL's copy of the benchmark (dataset/T2IS/all/test_metadata.jsonl of "
            "X-GenGroup/PaCo-RL on GitHub: original_idx, prompt, height, width, layout)."
        )
    out: dict[str, GridPrompt] = {}
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise InputError(f"{path}:{lineno}: not valid JSON ({err}).") from None
        if not isinstance(row, dict) or "original_idx" not in row or not isinstance(row.get("prompt"), str):
            raise InputError(f"{path}:{lineno}: a line needs 'original_idx' (the case id) and a 'prompt' string.")
        size = [row.get("height"), row.get("width")]
        out[str(row["original_idx"])] = GridPrompt(
            row["prompt"], row.get("layout"), *(int(v) if v else None for v in size)
        )
    return out


def case_seed(seed: int, case_id: str) -> int:
    """``seed`` plus the case's number (``TTTT_CCCC`` -> ``TTTT * 10000 + CCCC``; another id
    its CRC-32): the same for a case whatever the selection, shard or process count."""
    match = re.fullmatch(r"(\d+)_(\d+)", case_id)
    number = int(match.group(1)) * 10000 + int(match.group(2)) if match else zlib.crc32(case_id.encode())
    return seed + number


def grid_shape(rows: int, cols: int, height: int | None, width: int | None,
               resolution: int, grid_size: str = "case") -> tuple[int, int]:  # fmt: skip
    """``(height, width)`` to draw a ``rows x cols`` grid at (see the module's "Grid size")."""
    if grid_size == "square":
        return resolution, resolution
    scale = resolution / _REFERENCE_RESOLUTION
    height = height or rows * _REFERENCE_RESOLUTION // 2  # 512-px panels when the line has no size
    width = width or cols * _REFERENCE_RESOLUTION // 2

    def side(total: int, parts: int) -> int:
        panel = max(_MULTIPLE, round(total * scale / parts / _MULTIPLE) * _MULTIPLE)
        return panel * parts

    return side(height, rows), side(width, cols)


def plan_jobs(cases: list[T2ISCase], prompts: dict[str, GridPrompt], *, prompts_path: str,
              resolution: int, grid_size: str, seed: int) -> list[GridJob]:  # fmt: skip
    """One :class:`GridJob` per case, all checked before a model loads.

    Raises:
        UnknownItemError: a case without a line in the prompts file.
        ImageCountError: a layout whose panel count is not the case's ``output_image_count``.
    """
    jobs = []
    for case in cases:
        line = prompts.get(case.case_id)
        if line is None:
            raise UnknownItemError(
                f"case {case.case_id} has no line in --prompts {prompts_path} (no original_idx "
                f"{case.case_id!r}); use the metadata of the whole benchmark or leave the case out "
                "with --exclude."
            )
        try:
            rows, cols = parse_layout(line.layout or line.prompt)
        except LayoutError as err:
            raise ImageCountError(f"case {case.case_id} in {prompts_path}: {err}") from None
        if rows * cols != case.output_image_count:
            raise ImageCountError(
                f"case {case.case_id}: its layout {rows}x{cols} in {prompts_path} makes "
                f"{rows * cols} sub-images but T2IS-Bench.json asks for {case.output_image_count}; "
                "check that the prompts file is this benchmark's."
            )
        height, width = grid_shape(rows, cols, line.height, line.width, resolution, grid_size)
        jobs.append(GridJob(case.case_id, line.prompt, rows, cols, height, width, case_seed(seed, case.case_id)))
    return jobs


def _settings(config, prompts_sha: str) -> dict[str, Any]:
    """What the images depend on (compared on a re-run; the case selection is not: another
    selection adds cases to the same folder)."""
    return {
        "benchmark": "t2is-bench",
        "prompts_sha256": prompts_sha,
        "pipeline": config.pipeline,
        "model_name_or_path": config.model_name_or_path,
        "lora": config.lora,
        "resolution": config.resolution,
        "grid_size": config.grid_size,
        "guidance_scale": config.guidance_scale,
        "num_inference_steps": config.num_inference_steps,
        "max_sequence_length": config.max_sequence_length,
        "seed": config.seed,
        "dtype": config.gen_dtype,
        "seeding": "torch.Generator('cpu').manual_seed(seed + case number)",
        "cut": "paco_reward.grids.split_grid, row-major",
    }


def _check(config, device: str) -> None:
    if not config.images_dir:
        raise ConfigError("--images_dir: the folder to write <case_id>_<k:04d>.png to is required.")
    if config.grid_size not in GRID_SIZES:
        raise ConfigError(f"--grid_size must be one of {list(GRID_SIZES)}; got {config.grid_size!r}.")
    if config.resolution < _MULTIPLE or config.resolution % _MULTIPLE:
        raise ConfigError(f"--resolution must be a positive multiple of {_MULTIPLE}; got {config.resolution}.")
    if config.num_inference_steps < 1:
        raise ConfigError(f"--num_inference_steps must be at least 1; got {config.num_inference_steps}.")
    if config.gen_dtype is None:  # bfloat16 where it is fast, float32 on the CPU
        config.gen_dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if config.gen_dtype not in DTYPES:
        raise ConfigError(f"--gen_dtype must be one of {list(DTYPES)}; got {config.gen_dtype!r}.")


def run_generate(config) -> int:
    """Draw every selected case of this process's shard that is not on disk yet.

    Raises:
        ConfigError: a bad generation field.
        PathNotFoundError / InputError: a missing or malformed ``--prompts`` file.
        UnknownItemError / ImageCountError: a case the prompts file lacks or sizes otherwise.
        GenerationSettingsError: ``--images_dir`` holds images made with other settings.
    """
    import hashlib

    import torch
    from tqdm.auto import tqdm

    from paco_grpo.pipelines import get_pipeline_spec

    index, world, process_device = process_shard()
    device = config.device or process_device
    _check(config, device)
    spec = get_pipeline_spec(config.pipeline)  # an unknown name fails before anything loads
    if spec.edits:
        raise ConfigError(f"--pipeline {config.pipeline!r} edits reference images; T2IS-Bench needs a "
                          "text-to-image pipeline (flux, flux2, sd3, qwen_image, z_image, ...).")  # fmt: skip
    bench = T2ISBench.load(config.data)
    cases = bench.select(config.cases, config.exclude)
    prompts = load_prompts(config.prompts)
    jobs = plan_jobs(cases, prompts, prompts_path=config.prompts, resolution=config.resolution,
                     grid_size=config.grid_size, seed=config.seed)  # fmt: skip
    prompts_sha = hashlib.sha256(Path(config.prompts).read_bytes()).hexdigest()
    check_manifest(config.images_dir, _settings(config, prompts_sha), info=library_versions("diffusers"))
    mine = shard(jobs, index, world)
    todo = [j for j in mine if not all(readable_image(p) for p in j.paths(config.images_dir))]
    logger.info("process %d/%d: %d of its %d cases to draw", index, world, len(todo), len(mine))
    pipe = None
    if todo:
        pipe = load_pipeline(config.pipeline, config.model_name_or_path, lora=config.lora,
                             device=device, dtype=config.gen_dtype, edits=False)  # fmt: skip
    for job in tqdm(todo, desc=f"t2is generate [{index}/{world}]", disable=index != 0 or not todo):
        # 1. the pipeline's own sampler; true-CFG pipelines guide only with a negative prompt
        true_cfg = spec.runs_true_cfg(config.guidance_scale)
        extra = call_kwargs(pipe, max_sequence_length=config.max_sequence_length,
                            true_cfg_scale=config.guidance_scale if true_cfg else None,
                            negative_prompt=" " if true_cfg else None)  # fmt: skip
        grid = pipe(
            prompt=job.prompt,
            height=job.height,
            width=job.width,
            num_inference_steps=config.num_inference_steps,
            guidance_scale=config.guidance_scale,
            generator=torch.Generator("cpu").manual_seed(job.seed),
            **extra,
        ).images[0]
        # 2. cut row-major into the benchmark's sub-images; only those not on disk are written
        # (the grid is the same, so the others are already these bytes)
        for path, panel in zip(job.paths(config.images_dir), split_grid(grid, job.rows, job.cols, job.case_id)):
            if not readable_image(path):
                atomic_write_bytes(path, png_bytes(panel))
        logger.info("drew %s (%dx%d, seed %d)", job.case_id, job.width, job.height, job.seed)
    images = sum(j.rows * j.cols for j in todo)
    print(f"t2is generate [{index}/{world}]: drew {len(todo)} cases ({images} images), "
          f"{len(mine) - len(todo)} already done -> {config.images_dir}")  # fmt: skip
    return 0
