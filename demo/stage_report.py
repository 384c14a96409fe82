"""Stage: REPORT. One page a person can open: ``report.md`` in the output folder.

It holds the tables the stages of this run kept for it (``ctx.report``: the world
generator's oracle table and sample grids, the RL experiments' tables, reward curves and
before/after samples) and how long every stage took. A stage that did not run is left out.
"""

from __future__ import annotations

import os

from demo.context import DemoContext, markdown_table
from paco_reward.atomic_io import atomic_write_text


def run(ctx: DemoContext) -> None:
    out = ctx.path("report.md")
    parts = ["# paco-rl demo report", ""]
    for section in ctx.report:
        parts += [f"## {section.heading}", "", section.title + ".", ""]
        parts += [markdown_table(section.header, section.rows), ""]
        for path, caption in section.images:
            parts += [f"{caption}:", "", f"![{caption}]({os.path.relpath(path, out.parent)})", ""]
    seconds = ctx.artifacts.get("stage_seconds", {})
    if seconds:
        rows = [[name, f"{s:.0f}"] for name, s in seconds.items()]
        rows.append(["all (so far)", f"{sum(seconds.values()):.0f}"])
        parts += [
            "## Stage times",
            "",
            "The cached models' pretraining runs in the background meanwhile (`demo.pretrained`);"
            " a stage's time includes waiting for what it needs.",
            "",
            markdown_table(["stage", "seconds"], rows),
            "",
        ]
    atomic_write_text(out, "\n".join(parts))
    ctx.artifacts["report"] = out
    print(f"Report: {out}")
