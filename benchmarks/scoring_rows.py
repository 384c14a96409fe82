"""The GPU check's scoring rows: workloads, how a row is timed, and what it reports.

Two workloads, through the public path users and the trainer take:

* **pairs**: ``PacoReward.score_pairs`` of ``batch`` pairs of two distinct random
  ``resolution`` px images, each pair with its own theme;
* **grpo**: the GRPO consistency reward (:class:`paco_grpo.rewards.ConsistencyReward`, the
  trainer's reward) of ``grids`` 2x2 grids of ``panel`` px random panels, each with a real
  T2IS prompt of ``recipes/data/t2is_train_metadata.jsonl`` (its theme: the global
  description, tens of tokens): one ``score_pairs`` call of the 6 panel pairs of every grid.

A row is ``repeats`` timed repeats after a warm-up call; each repeat makes calls (cycling over
distinct inputs made beforehand, so no input generation is timed) until it has scored
``min_pairs`` pairs or run ``min_seconds``. It reports the median pairs/s (and grids/s) with
the interquartile range over the repeats, the stage breakdown per pair (host preprocessing:
wall clock, in the worker thread, beside the model; vision tower and language model: CUDA
events on a GPU, wall clock on a CPU; :class:`paco_reward.stage_timer.StageTimer`), on a GPU
the host-device synchronisations of one call (``torch.cuda.set_sync_debug_mode``), the
peak memory, the FLOPs per pair (:mod:`benchmarks.scoring_flops`) and the share of the
GPU's dense bf16 peak that makes.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from benchmarks.scoring_flops import ScoringFlops
from paco_reward.stage_timer import StageTimer

T2IS_METADATA = (
    Path(__file__).resolve().parents[1] / "recipes" / "data" / "t2is_train_metadata.jsonl"
)
STAGES = ("preprocess", "vision", "llm")


@dataclass(frozen=True)
class RowSettings:
    """How long a row is timed, and the bound it is compared with."""

    repeats: int
    min_pairs: int
    min_seconds: float
    bf16_peak_tflops: float


def random_pairs(count: int, size: int, seed: int) -> list[tuple[Image.Image, Image.Image, str]]:
    """``count`` pairs of distinct random ``size`` px images, each with its own theme."""
    rng = np.random.default_rng(seed)

    def image() -> Image.Image:
        return Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))

    return [(image(), image(), f"theme {seed}-{k}") for k in range(count)]


def t2is_prompts(layout: str = "2x2") -> list[str]:
    """The T2IS training prompts of ``layout`` grids (the released PaCo-RL metadata)."""
    with T2IS_METADATA.open() as lines:
        prompts = [json.loads(line)["prompt"] for line in lines if line.strip()]
    return [p for p in prompts if f"{layout} grid" in p]


def t2is_grids(count: int, panel: int, seed: int) -> tuple[list[Image.Image], list[str]]:
    """``count`` 2x2 grids of random ``panel`` px panels and T2IS prompts (cycled by seed)."""
    rng = np.random.default_rng(seed)
    prompts = t2is_prompts()
    grids = [
        Image.fromarray(rng.integers(0, 256, (2 * panel, 2 * panel, 3), dtype=np.uint8))
        for _ in range(count)
    ]
    return grids, [prompts[(seed * count + k) % len(prompts)] for k in range(count)]


def _syncs_of(call: Callable[[], Any]) -> int | None:
    """Host-device synchronisations ``call`` makes on the current CUDA device (None off CUDA)."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def measure_row(
    call: Callable[[Any], np.ndarray],
    inputs: Sequence[Any],
    pairs_per_call: int,
    backend,
    memory,
    settings: RowSettings,
) -> dict[str, Any]:
    """Time ``call`` on ``inputs`` (cycled) as the module's docstring says; ``backend`` is
    the ``LocalBackend`` whose stages are timed, ``memory`` the check's ``_Memory``."""
    device = backend.device
    memory.reset()
    # warm-up (kernels, allocator, caches); its scores are the row's: inputs[0] is fixed
    scores = np.asarray(call(inputs[0]), dtype=np.float64)
    rates: list[float] = []
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    for _ in range(settings.repeats):
        backend.stage_timer = timer = StageTimer(device)
        pairs, calls = 0, 0
        memory.sync()
        start = time.perf_counter()
        while pairs < settings.min_pairs and time.perf_counter() - start < settings.min_seconds:
            call(inputs[calls % len(inputs)])
            pairs, calls = pairs + pairs_per_call, calls + 1
        memory.sync()
        rates.append(pairs / (time.perf_counter() - start))
        totals = timer.totals()
        for stage in STAGES:
            stages[stage].append(totals.get(stage, 0.0) / pairs)
    backend.stage_timer = None
    median = float(np.median(rates))
    return {
        "pairs_per_call": pairs_per_call,
        "repeats": settings.repeats,
        "pairs_per_repeat": pairs,
        "pairs_per_s": median,
        "pairs_per_s_iqr": [float(q) for q in np.percentile(rates, [25, 75])],
        "seconds_per_call": pairs_per_call / median,
        "stage_ms_per_pair": {s: 1000 * float(np.median(v)) for s, v in stages.items()},
        "syncs_per_call": _syncs_of(lambda: call(inputs[0])) if device.type == "cuda" else None,
        "peak_memory_bytes": memory.peak(),
        "scores": scores.tolist(),
    }


def with_flops(row: dict[str, Any], flops_per_pair: float, settings: RowSettings) -> dict[str, Any]:
    """``row`` with its FLOPs per pair, the TFLOP/s it reaches and that share of the bf16 peak."""
    tflops = row["pairs_per_s"] * flops_per_pair / 1e12
    return {
        **row,
        "tflop_per_pair": flops_per_pair / 1e12,
        "tflops": tflops,
        "bf16_peak_tflops": settings.bf16_peak_tflops,
        "fraction_of_bf16_peak": tflops / settings.bf16_peak_tflops,
    }


def pair_rows(reward, batch_sizes: Sequence[int], resolution: int, memory, settings: RowSettings):
    """The **pairs** workload at each batch size (one ``LocalBackend`` chunk size each)."""
    backend = reward.backend
    flops = ScoringFlops.of(backend.model)
    rows = []
    for batch in batch_sizes:
        backend.batch_size = batch
        count = max(1, math.ceil(settings.min_pairs / batch))
        inputs = [random_pairs(batch, resolution, 1000 * batch + k) for k in range(count)]
        row = measure_row(reward.score_pairs, inputs, batch, backend, memory, settings)
        per_pair = _pair_flops(backend, flops, inputs[0])
        rows.append({"engine": "transformers", "workload": "pairs", "batch_size": batch,
                     **with_flops(row, per_pair, settings)})  # fmt: skip
    return rows


def grpo_row(reward, grids: int, panel: int, batch: int, memory, settings: RowSettings):
    """The **grpo** workload: ``grids`` grids a reward call, ``batch`` pairs a forward."""
    from paco_grpo.rewards.consistency import ConsistencyReward

    backend = reward.backend
    backend.batch_size = batch
    consistency = ConsistencyReward(reward)
    pairs_per_call = 6 * grids
    count = max(1, math.ceil(settings.min_pairs / pairs_per_call))
    inputs = [t2is_grids(grids, panel, seed) for seed in range(count)]

    def call(grids_and_prompts):
        images, prompts = grids_and_prompts
        return consistency(images, prompts, [{} for _ in images])

    row = measure_row(call, inputs, pairs_per_call, backend, memory, settings)
    row["grids_per_s"] = row["pairs_per_s"] / 6
    per_pair = _grid_flops(backend, ScoringFlops.of(backend.model), inputs[0]) / pairs_per_call
    return {"engine": "transformers", "workload": "grpo", "batch_size": batch, "grids_per_call":
            grids, "panel": panel, **with_flops(row, per_pair, settings)}  # fmt: skip


def _grid_of(backend, image: Image.Image) -> tuple[int, int, int]:
    from paco_reward.images import resize_for_model

    _, grid = backend.preprocess_images([resize_for_model(image, backend.image_policy)])
    return tuple(int(v) for v in grid[0].tolist())


def _pair_flops(backend, flops: ScoringFlops, pairs) -> float:
    """Mean FLOPs of a pair of ``pairs``: both images' vision tower and the prompt."""
    from paco_reward.templates import render_instruction

    total = 0.0
    for a, b, theme in pairs:
        grids = [_grid_of(backend, a), _grid_of(backend, b)]
        ids, _ = backend.rows(render_instruction("consistency", theme), grids)
        total += flops.vision(grids) + flops.language(len(ids))
    return total / len(pairs)


def _grid_flops(backend, flops: ScoringFlops, grids_and_prompts) -> float:
    """FLOPs of one reward call: each panel's vision tower once, each pair's prompt."""
    from paco_reward.grids import split_grid, split_panel_prompts
    from paco_reward.templates import render_instruction

    total = 0.0
    for grid, prompt in zip(*grids_and_prompts):
        panels = [_grid_of(backend, p) for p in split_grid(grid, 2, 2)]
        text = render_instruction("consistency", split_panel_prompts(prompt)[0])
        total += flops.vision(panels)
        for a, b in combinations(panels, 2):
            total += flops.language(len(backend.rows(text, [a, b])[0]))
    return total


def environment_of(backend) -> dict[str, Any]:
    """What a scoring row ran with: attention implementations, processor, torch, cuDNN."""
    model = backend.model
    vision = model.config.vision_config
    return {
        "attention": {"vision": vision._attn_implementation, "text": backend.text_attention},
        "processor": type(backend.processor).__name__,
        "image_processor": type(backend.processor.image_processor).__name__,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "vision_batch_size": backend.vision_batch_size,
    }
