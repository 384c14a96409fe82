"""paco_grpo.data: panel descriptions of T2IS and text prompt files, checked at load time."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from paco_grpo.data import load_prompts, split_prompt_panels
from paco_reward.errors import PacoError, PromptError
from paco_reward.grids import find_panel_markers, parse_layout

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
# The 150 real 2x2 prompts (the recipes' copy is the same file), and real prompts of every
# layout of the public release: [LEFT]: ... strips, [TOP]-[LEFT]: ... grids, and the
# bracketless PANEL-1: ... of its 1x5 and 1x7 strips.
REAL_FILES = [DATA / "t2is_train_metadata.jsonl", DATA / "t2is_layouts_sample.jsonl"]
STRIP_1X5 = next(
    json.loads(line)
    for line in (DATA / "t2is_layouts_sample.jsonl").read_text().splitlines()
    if json.loads(line)["layout"] == "1x5"
)


def _write_jsonl(path: Path, rows: list[dict | None]) -> Path:
    """One JSON line per row; ``None`` writes a blank line (so line numbers are checked)."""
    path.write_text("".join((json.dumps(r) if r else "") + "\n" for r in rows))
    return path


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_every_real_prompt_loads_one_panel_text_per_panel(path, caplog):
    with caplog.at_level(logging.WARNING, logger="paco_grpo.data"):
        items = load_prompts(path)
    assert not caplog.records
    for item in items:
        rows, cols = parse_layout(item.metadata["layout"])
        panels = item.metadata["panel_prompts"]
        assert len(panels) == rows * cols and all(panels), item.id
        first_marker = find_panel_markers(item.prompt)[0]
        assert item.metadata["global_description"] == item.prompt.split(first_marker)[0].strip()
    if path.name == "t2is_layouts_sample.jsonl":
        strip = next(i for i in items if i.id == STRIP_1X5["idx"])
        assert strip.metadata["panel_prompts"][0].startswith("A waiter in a pressed white shirt")


@pytest.mark.parametrize("suffix", [".jsonl", ".txt"])
def test_markers_that_do_not_fit_the_layout_are_an_error_naming_file_and_line(tmp_path, suffix):
    prompt = STRIP_1X5["prompt"].split(" PANEL-5:")[0]  # a real 1x5 strip, a panel short
    path = tmp_path / f"p{suffix}"
    if suffix == ".jsonl":
        _write_jsonl(path, [STRIP_1X5, None, {"idx": "short", "prompt": prompt}])
    else:
        path.write_text(f"{STRIP_1X5['prompt']}\n\n{prompt}\n")
    match = (
        rf"p\{suffix}:3: layout 1x5 needs 5 panel descriptions but the prompt has 4 "
        r"\(markers: \['PANEL-1:', 'PANEL-2:', 'PANEL-3:', 'PANEL-4:'\]\); fix the layout"
    )
    with pytest.raises(PromptError, match=match):
        load_prompts(path)


def test_a_layout_field_that_disagrees_with_the_markers_is_an_error(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", [{**STRIP_1X5, "layout": "2x2"}])
    with pytest.raises(PromptError, match=r"p\.jsonl:1: layout 2x2 needs 4 .* has 5") as err:
        load_prompts(path)
    assert isinstance(err.value, PacoError) and isinstance(err.value, ValueError)
    # The recipe's layout is the last resort: a strip that names its own layout keeps it.
    text = tmp_path / "p.txt"
    text.write_text(STRIP_1X5["prompt"] + "\n")
    (item,) = load_prompts(text, layout="2x2")
    assert item.metadata["layout"] == "1x5"


def test_a_t2is_prompt_without_markers_is_a_whole_set_prompt_with_a_warning(tmp_path, caplog):
    rows = [
        {"idx": "a", "prompt": "a 2x2 grid of foxes"},
        {"idx": "b", "prompt": "one fox", "layout": "1x1"},  # one panel: nothing to mark
        {"idx": "c", "prompt": "foxes", "layout": "1x3"},
    ]
    path = _write_jsonl(tmp_path / "p.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="paco_grpo.data"):
        a, b, c = load_prompts(path)
    assert a.metadata["panel_prompts"] == [] and a.metadata["global_description"] == a.prompt
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 2 of 3 prompts have no panel markers for a multi-panel layout (lines 1, 3); "
        "each is read as a whole-set prompt: its theme is the whole prompt and CLIP-T compares "
        "the whole grid with it. Mark each panel ('[TOP]-[LEFT]:', 'PANEL-1:') to give panels "
        "their own text; plain prompts in a .txt file load without this warning."
    ]
    # Plain text prompts are whole-set prompts by design.
    caplog.clear()
    text = tmp_path / "p.txt"
    text.write_text("a 2x2 grid of foxes\n")
    with caplog.at_level(logging.WARNING, logger="paco_grpo.data"):
        load_prompts(text)
    assert not caplog.records


def test_split_prompt_panels_forms_and_errors():
    assert split_prompt_panels("f:1", "Foxes. PANEL-1:a. Panel 2 : b.", "1x2") == (
        "Foxes.",
        ["a.", "b."],
    )
    assert split_prompt_panels("f:1", "Foxes.", "2x3") == ("Foxes.", [])
    with pytest.raises(
        PromptError, match=r"f:7: layout 1x3 needs 3 .* has 2 \(markers: \['\[LEFT\]:'"
    ):
        split_prompt_panels("f:7", "Foxes. [LEFT]: a. [RIGHT]: b.", "1x3")
