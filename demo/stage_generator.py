"""Stage: GENERATOR PRETRAINING, a tiny FLUX that draws the world. Not PaCo.

The RL stages need a generator that draws the world's characters, with room to become more
consistent. This stage pretrains one (:mod:`demo.world_generator`: a VAE, then flow
matching on the world's grids and prompts), cached per machine and seed like the stand-in,
and has the world's oracle judge its grids for held-out prompts against the world's own
renders of the same prompts: how often a panel shows the prompt's value of each attribute,
the grids' consistency and their prompt alignment. Writes ``generator/samples.png``
(renders above, generated grids below) and sets ``ctx.artifacts["world_generator"]``.
"""

from __future__ import annotations

import time

from PIL import Image

from data_pipeline.storage import save_image_atomic
from demo import pretrained
from demo.context import DemoContext, ReportSection, cache_dir
from demo.documented import documented
from demo.world_generator import (
    GeneratorConfig,
    generator_world,
    held_out_prompts,
    read_generator_info,
    sample_grids,
)
from demo.world_judge import judge_grids

HELD_OUT = 48


def sample_sheet(rows: list[list[Image.Image]], scale: int = 2) -> Image.Image:
    """Rows of equal-size grids as one image, each grid enlarged ``scale`` times."""
    width, height = rows[0][0].size
    sheet = Image.new(
        "RGB", (len(rows[0]) * (width + 4) * scale, len(rows) * (height + 4) * scale), "white"
    )
    for r, row in enumerate(rows):
        for c, grid in enumerate(row):
            big = grid.resize((width * scale, height * scale), Image.NEAREST)
            sheet.paste(big, (c * (width + 4) * scale, r * (height + 4) * scale))
    return sheet


def run(ctx: DemoContext) -> None:
    from diffusers import FluxPipeline

    config = GeneratorConfig(seed=ctx.seed)
    print(
        "GENERATOR PRETRAINING (not PaCo): a tiny FLUX learns to draw the world's 2x2 grids "
        f"({config.vae_steps} VAE steps, {config.steps} flow-matching steps; cached in "
        f"{cache_dir()})."
    )
    start = time.perf_counter()
    path = pretrained.generator(ctx.seed)
    info = read_generator_info(path)
    pipe = FluxPipeline.from_pretrained(path)
    records = held_out_prompts(config, HELD_OUT)
    world = generator_world(config)
    renders = [world.render_grid(r, 0) for r in records]
    generated = sample_grids(pipe, records, seed=ctx.seed)
    # At half size (what RL trains at in experiment 3), enlarged for the oracle.
    half = [
        grid.resize(renders[0].size, Image.BILINEAR)
        for grid in sample_grids(pipe, records, seed=ctx.seed, size=records[0]["height"] // 2)
    ]
    judged = {
        "world renders": judge_grids(renders, records),
        "generator": judge_grids(generated, records),
        "generator at half size, enlarged": judge_grids(half, records),
    }
    attributes = list(judged["generator"]["shows_prompt"])
    title = (
        f"Oracle on {HELD_OUT} held-out prompts: share of panels showing the prompt's value "
        f"(trained {info['vae_seconds'] + info['flow_seconds']:.0f}s; this run "
        f"{time.perf_counter() - start:.0f}s)"
    )
    header = ["grids", *attributes, "consistency", "alignment", "unreadable panels"]
    rows = [
        [
            name,
            *(j["shows_prompt"][a] for a in attributes),
            j["consistency"],
            j["alignment"],
            j["unreadable_panels"],
        ]
        for name, j in judged.items()
    ]
    sheet = ctx.path("generator", "samples.png")
    save_image_atomic(sample_sheet([renders[:8], generated[:8]]), sheet)
    ctx.table(
        ReportSection(
            "A tiny FLUX that draws the world",
            title,
            header,
            rows,
            [(sheet, "World renders (above) and generated grids (below), held-out prompts")],
        )
    )
    print(documented("generator.consistency", judged["generator"]["consistency"]))
    print(documented("generator.alignment", judged["generator"]["alignment"]))
    print(f"Samples (world renders above, generated below): {sheet}")
    ctx.artifacts["world_generator"] = path
