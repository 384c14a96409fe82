"""The demo's documented ranges and the miniature study's page cannot drift apart: every
figure of demo/documented.py is in the page's table, written as the demo writes it, under a
section the page has; every figure a stage prints is one of them; and the printout says
when a figure falls outside its range (a note, not an error)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from demo import documented as doc
from demo.__main__ import summary

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / doc.PAGE).read_text()


@pytest.mark.parametrize("key", sorted(doc.FIGURES))
def test_every_figure_is_on_the_page_as_the_demo_prints_it(key):
    figure = doc.FIGURES[key]
    assert figure.low <= figure.high
    assert f"| {figure.name} | {doc.range_text(key)} |" in PAGE, key
    assert re.search(rf"^#+ {re.escape(figure.section)}$", PAGE, re.MULTILINE), figure.section


def test_every_figure_the_stages_print_is_documented():
    from demo.stage_world_edit import ARMS as EDIT_ARMS
    from demo.stage_world_grpo import ARMS
    from demo.stage_world_hacking import ARMS as HACKING_ARMS

    printed = set()
    for path in (ROOT / "demo").glob("stage_*.py"):
        printed |= set(re.findall(r'documented\("([\w.]+)"', path.read_text()))
    printed |= {f"world_grpo.{arm.slug}" for arm in ARMS}
    printed |= {f"world_edit.{arm.slug}" for arm in EDIT_ARMS}
    printed |= {f"world_hacking.{arm.slug}" for arm in HACKING_ARMS}
    assert printed == set(doc.FIGURES)
    # Each stage that prints one names it with the f-string the keys above stand for.
    assert 'documented(f"world_grpo.{arm.slug}"' in (ROOT / "demo/stage_world_grpo.py").read_text()
    assert 'documented(f"world_edit.{arm.slug}"' in (ROOT / "demo/stage_world_edit.py").read_text()
    hacking = (ROOT / "demo/stage_world_hacking.py").read_text()
    assert 'documented(f"world_hacking.{arm.slug}"' in hacking


def test_a_figure_is_printed_next_to_its_range_with_a_note_when_outside():
    doc.FIGURES["test.gain"] = doc.Figure("a gain", 0.012, 0.036, "Somewhere", signed=True)
    doc.FIGURES["test.auc"] = doc.Figure("an AUC", 0.821, 0.906, "Elsewhere")
    try:
        assert doc.documented("test.auc", 0.85) == (
            f"an AUC 0.850 (documented 0.821–0.906, {doc.PAGE})"
        )
        assert doc.documented("test.gain", 0.0204) == (
            f"a gain +0.020 (documented +0.012 to +0.036, {doc.PAGE})"
        )
        # An end of the range, at the printed precision, is inside it.
        assert "outside" not in doc.documented("test.auc", 0.9063)
        for value in (0.8204, 0.95, float("nan")):
            assert doc.documented("test.auc", value).endswith(
                "; outside that range: results move with the CPU (see 'Elsewhere' there)"
            )
        assert "-0.010 (documented" in doc.documented("test.gain", -0.01)
    finally:
        del doc.FIGURES["test.gain"], doc.FIGURES["test.auc"]


def test_the_last_line_says_where_the_report_and_the_study_are(tmp_path):
    from demo import stage_report
    from demo.context import DemoContext

    assert "no report" in summary(None)
    ctx = DemoContext(output_dir=tmp_path)
    stage_report.run(ctx)
    line = summary(ctx.artifacts["report"])
    assert f"this run's report: {tmp_path / 'report.md'}" in line
    assert doc.PAGE in line and "make docs" in line and doc.SITE_PAGE in line
