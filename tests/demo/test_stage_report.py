"""The report is one Markdown page whose tables are the stages' tables and whose images exist."""

from __future__ import annotations

import re

from PIL import Image

from demo.context import DemoContext, ReportSection
from demo.stage_report import run


def test_the_report_holds_the_stages_tables_and_links_their_images(tmp_path, capsys):
    ctx = DemoContext(output_dir=tmp_path / "out")
    samples = ctx.path("generator", "samples.png")
    Image.new("RGB", (8, 8)).save(samples)
    plot = ctx.path("world_grpo", "rewards.png")
    Image.new("RGB", (8, 8)).save(plot)
    ctx.table(
        ReportSection(
            "Generator",
            "Oracle",
            ["grids", "colour"],
            [["world renders", 1.0], ["generator", 0.5]],
            [(samples, "samples")],
        )
    )
    ctx.table(
        ReportSection(
            "Experiments",
            "Gains",
            ["reward", "gain"],
            [["PaCo evaluator", "+0.050 [+0.010, +0.090]"]],
            [(plot, "curves"), (samples, "sheet")],
        )
    )
    assert "== Oracle ==" in capsys.readouterr().out
    ctx.artifacts["stage_seconds"] = {"generator": 12.3, "world_grpo": 30.4}
    run(ctx)
    text = (tmp_path / "out" / "report.md").read_text()
    assert text.index("## Generator") < text.index("## Experiments")
    assert "| world renders | 1.0000 |" in text and "| generator | 0.5000 |" in text
    assert "| PaCo evaluator | +0.050 [+0.010, +0.090] |" in text
    assert "| generator | 12 |" in text and "| all (so far) | 43 |" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links == ["generator/samples.png", "world_grpo/rewards.png", "generator/samples.png"]
    assert all((tmp_path / "out" / link).is_file() for link in links)


def test_a_run_without_the_world_stages_still_reports(tmp_path):
    ctx = DemoContext(output_dir=tmp_path)
    run(ctx)
    assert (tmp_path / "report.md").read_text().startswith("# paco-rl demo report")
