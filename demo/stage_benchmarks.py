"""Stage: human-alignment benchmarks for the demo's evaluator against the baselines.

ConsistencyRank runs on the data stage's set (``ctx.artifacts["consistency_rank_dir"]``)
when there is one, else on a small synthetic set of coloured-shape panels made here;
the evaluator is the trained one when the training stage ran, else the untrained one.
A small synthetic EditReward-Bench set is run the same way.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np

from benchmarks import consistency_rank, edit_reward_bench
from benchmarks.common import NamedScorer, PacoPairScorer
from benchmarks.synthetic import make_consistency_rank_set, make_edit_reward_set
from demo.context import DemoContext, print_table
from paco_reward import PacoReward
from paco_reward.baselines import CLIPImageScorer, PixelScorer
from paco_reward.testing.clip import build_tiny_clip


def _load_evaluator(path: str | Path) -> PacoReward:
    """A merged model folder, or a LoRA adapter folder on top of its base model."""
    path = Path(path)
    adapter_config = path / "adapter_config.json"
    if adapter_config.exists() and not (path / "config.json").exists():
        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        return PacoReward.from_pretrained(base, adapter=path)
    return PacoReward.from_pretrained(path)


def _synthetic_human_orders(n_items: int, seed: int) -> list[list[int]]:
    """Human orders (as colour-shift indices) that mostly follow the size of the change,
    with a random adjacent swap in about half of the items, as people disagree on close calls."""
    rng = np.random.default_rng(seed)
    orders = []
    for _ in range(n_items):
        order = [0, 1, 2, 3]
        if rng.random() < 0.5:
            k = int(rng.integers(0, 3))
            order[k], order[k + 1] = order[k + 1], order[k]
        orders.append(order)
    return orders


def _cells(rows: list[list]) -> list[list]:
    return [
        ["-" if c is None or (isinstance(c, float) and math.isnan(c)) else c for c in row]
        for row in rows
    ]


def run(ctx: DemoContext) -> None:
    evaluator_dir = ctx.artifacts.get("trained_evaluator") or ctx.artifacts["untrained_evaluator"]
    which = "trained" if ctx.artifacts.get("trained_evaluator") else "untrained"
    data_dir = ctx.artifacts.get("consistency_rank_dir")
    if data_dir is None:
        categories = ["character", "style"] * 6
        data_dir = make_consistency_rank_set(
            ctx.path("benchmarks", "consistency_rank_data", "x").parent,
            _synthetic_human_orders(len(categories), ctx.seed),
            categories=categories,
            seed=ctx.seed,
        )["data_dir"]
        source = "synthetic coloured-shape set made by this stage"
    else:
        source = "the data stage's ConsistencyRank set"

    reward = _load_evaluator(evaluator_dir)
    clip_dir = build_tiny_clip(ctx.path("models", "tiny-clip"), seed=ctx.seed)
    ctx.artifacts["tiny_clip"] = clip_dir
    paco_name = f"PaCo tiny ({which})"
    scorers = [
        NamedScorer(paco_name, PacoPairScorer(reward, "rank", paco_name), str(evaluator_dir)),
        NamedScorer("CLIP-I (tiny)", CLIPImageScorer(clip_dir), f"clip:{clip_dir}"),
        NamedScorer("Pixel L1", PixelScorer(), "pixel"),
    ]

    # Results are resumable; a demo run starts them afresh (the evaluator may have changed).
    out_dir = ctx.path("benchmarks", "consistency_rank", "x").parent
    edit_out = ctx.path("benchmarks", "edit_reward_bench", "x").parent
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(edit_out, ignore_errors=True)
    results = consistency_rank.run_benchmark(data_dir, scorers, out_dir, progress=False)
    header, rows = consistency_rank.summary_rows(results)
    print_table(
        f"ConsistencyRank on {source} ({results[paco_name]['overall']['n_items']} items); "
        "tau_ref/rho_ref = released-evaluator definitions used by the paper rows",
        header,
        _cells(rows),
    )
    ctx.artifacts["consistency_rank_results"] = out_dir

    edit_dir = ctx.path("benchmarks", "edit_reward_data", "x").parent
    if not (edit_dir / "dataset_info.json").exists():
        rng = np.random.default_rng(ctx.seed)
        tasks = edit_reward_bench.EDIT_TASK_TYPES
        rows_spec = [
            {
                "task_type": tasks[i % len(tasks)],
                "dimension": edit_reward_bench.DIMENSIONS[i % 3],
                "deltas": [int(d) for d in rng.choice([0, 20, 50, 90], size=2, replace=False)],
            }
            for i in range(12)
        ]
        make_edit_reward_set(edit_dir, rows_spec)
    edit_results = edit_reward_bench.run_benchmark(edit_dir, scorers, edit_out, progress=False)
    header, rows = edit_reward_bench.summary_rows(edit_results)
    print_table(
        "EditReward-Bench format, 12 synthetic comparisons (image-only baselines use one "
        "similarity for every dimension)",
        header,
        _cells(rows),
    )
    ctx.artifacts["edit_reward_bench_results"] = edit_out
    print(f"Tables, per-item JSONL and bar charts in {out_dir}/ and {edit_out}/")
