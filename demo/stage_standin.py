"""Stage: STAND-IN PRETRAINING of the tiny evaluator's base model. Not PaCo.

A real PaCo-Reward starts from Qwen2.5-VL-7B-Instruct, which already reads images; the tiny
Qwen2.5-VL of this demo starts from random weights. This stage stands in for that
pretraining: the tiny model learns to describe single panels of the data stage's world
("Describe the image." -> "Shape circle, colour red, ...") from their ground truth, with no
pairs and no consistency labels (:mod:`demo.standin`). The train stage then
runs this library's PaCo SFT from it, as a user runs it from the real base model.

The result is cached per machine and seed (``PACO_RL_CACHE``, default ``~/.cache/paco-rl``):
a second demo run reuses it. Sets ``ctx.artifacts["base_model"]``.
"""

from __future__ import annotations

import time
from pathlib import Path

from demo.context import DemoContext, cache_dir, print_table

# The model's view of a 64-px panel: 112 x 112 pixels, 16 vision tokens.
IMAGE_PIXELS = 112 * 112
STEPS = 1600
# The tiny model learns to read panels fastest with its two text layers; comparing two
# panels at the first answer token needs more depth (with two layers the PaCo SFT stalled
# near 0.75 ROC-AUC on truth pairs). So two identity layers are appended after the
# pretraining (block expansion), for the SFT to train.
EXPAND_TEXT_LAYERS = 2


def standin_model(
    seed: int,
    world,
    steps: int = STEPS,
    image_pixels: int = IMAGE_PIXELS,
    progress: bool = True,
) -> Path:
    """The stand-in-pretrained tiny Qwen2.5-VL for ``world`` (cached; trained when missing)."""
    from data_pipeline.synthetic import WORLD_VERSION
    from demo.standin import StandInConfig, pretrain_describer

    config = StandInConfig(
        steps=steps,
        image_pixels=image_pixels,
        expand_text_layers=EXPAND_TEXT_LAYERS,
        seed=seed,
    )
    data_id = (
        f"synthetic-world-v{WORLD_VERSION}:size={world.panel_size}:pose={world.pose}"
        f":lighting={world.lighting}"
    )
    return pretrain_describer(
        cache_dir() / "standin" / config.key(data_id),
        world.describe_example,
        config,
        data_id,
        progress,
    )


def world_of(data_dir: str | Path):
    """The synthetic world the data stage's export was drawn from."""
    from data_pipeline.pipeline import load_synthetic_config

    return load_synthetic_config(Path(data_dir).parent).world()


def run(ctx: DemoContext) -> None:
    from demo.standin import read_standin_info

    data_dir = ctx.artifacts.get("pair_dataset_dir")
    if data_dir is None:
        print("No data stage: nothing to describe; the train stage uses its toy task.")
        return
    print(
        "STAND-IN PRETRAINING (not PaCo): the from-scratch tiny Qwen2.5-VL learns to describe "
        f"single panels of the world ({STEPS} steps of 32 panels; cached in {cache_dir()})."
    )
    start = time.perf_counter()
    base = standin_model(ctx.seed, world_of(data_dir))
    info = read_standin_info(base)
    readout = info["readout_accuracy"]
    print_table(
        f"Stand-in: greedy description of {info['config']['eval_examples']} fresh panels "
        f"(trained in {info['train_seconds']:.0f}s; this run {time.perf_counter() - start:.0f}s)",
        ["clause", "accuracy"],
        [[k, v] for k, v in readout.items()],
    )
    ctx.artifacts["base_model"] = base
