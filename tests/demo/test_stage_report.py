"""The report is one Markdown page whose tables are the stages' tables and whose images exist."""

from __future__ import annotations

import re

from PIL import Image

from demo.context import DemoContext
from demo.stage_report import run


def test_the_report_holds_the_stages_tables_and_links_their_images(tmp_path):
    ctx = DemoContext(output_dir=tmp_path / "out")
    samples = ctx.path("generator", "samples.png")
    Image.new("RGB", (8, 8)).save(samples)
    plot = ctx.path("world_grpo", "rewards.png")
    Image.new("RGB", (8, 8)).save(plot)
    ctx.artifacts["generator_table"] = {
        "title": "Oracle",
        "header": ["grids", "colour"],
        "rows": [["world renders", 1.0], ["generator", 0.5]],
        "samples": samples,
    }
    ctx.artifacts["world_grpo"] = {
        "title": "Experiments",
        "header": ["reward", "gain"],
        "rows": [["PaCo evaluator", "+0.050 [+0.010, +0.090]"]],
        "plot": plot,
        "samples": [plot],
    }
    ctx.artifacts["stage_seconds"] = {"generator": 12.3}
    run(ctx)
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| world renders | 1.0000 |" in text and "| generator | 0.5000 |" in text
    assert "| PaCo evaluator | +0.050 [+0.010, +0.090] |" in text
    assert "| generator | 12 |" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 3
    assert all((tmp_path / "out" / link).is_file() for link in links)


def test_a_run_without_the_world_stages_still_reports(tmp_path):
    ctx = DemoContext(output_dir=tmp_path)
    run(ctx)
    assert (tmp_path / "report.md").read_text().startswith("# paco-rl demo report")
