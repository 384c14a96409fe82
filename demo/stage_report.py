"""Stage: REPORT. One page a person can open: ``report.md`` in the output folder.

It collects what the stages of this run left in ``ctx.artifacts``: the world generator's
oracle table and sample grids, the RL experiments' table, reward curves and before/after
samples, and how long every stage took. A stage that did not run is left out.
"""

from __future__ import annotations

import os
from pathlib import Path

from demo.context import DemoContext, markdown_table
from paco_reward.atomic_io import atomic_write_text


def _image(path: Path, report_dir: Path, caption: str) -> str:
    return f"![{caption}]({os.path.relpath(path, report_dir)})"


def run(ctx: DemoContext) -> None:
    out = ctx.path("report.md")
    here = out.parent
    parts = ["# paco-rl demo report", ""]
    generator = ctx.artifacts.get("generator_table")
    if generator:
        parts += [
            "## A tiny FLUX that draws the world",
            "",
            generator["title"] + ".",
            "",
            markdown_table(generator["header"], generator["rows"]),
            "",
            _image(generator["samples"], here, "world renders (top) and generated grids (bottom)"),
            "",
        ]
    world_grpo = ctx.artifacts.get("world_grpo")
    if world_grpo:
        parts += [
            "## PaCo-GRPO in miniature",
            "",
            world_grpo["title"] + ".",
            "",
            markdown_table(world_grpo["header"], world_grpo["rows"]),
            "",
            _image(world_grpo["plot"], here, "train rewards per epoch"),
            "",
        ]
        for sheet in world_grpo["samples"]:
            parts += [
                f"{sheet.stem} (held-out prompts; before above, after below):",
                "",
                _image(sheet, here, sheet.stem),
                "",
            ]
    seconds = ctx.artifacts.get("stage_seconds", {})
    if seconds:
        rows = [[name, f"{s:.0f}"] for name, s in seconds.items()]
        parts += ["## Stage times", "", markdown_table(["stage", "seconds"], rows), ""]
    atomic_write_text(out, "\n".join(parts))
    print(f"Report: {out}")
