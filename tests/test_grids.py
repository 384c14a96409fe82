"""Stage 1-2 primitives: layouts, panel prompts and grid cutting, on real T2IS prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from paco_reward.errors import LayoutError, PromptError
from paco_reward.grids import (
    find_panel_markers,
    format_grid_prompt,
    panel_markers,
    parse_layout,
    split_grid,
    split_panel_prompts,
)

# Every layout the T2IS format uses (1xN strips and 2xN grids).
LAYOUTS = [(1, n) for n in range(2, 7)] + [(2, n) for n in range(2, 6)]
# Real T2IS prompts of every layout of the public PaCo-RL release (its "all" split, 596
# prompts): one per layout, two 1x5. Their marker forms, counted over those 596: [LEFT]:
# [MIDDLE]: [RIGHT]: (1x2, 1x3), [TOP]-[LEFT]: ... (2x2, 2x3), [TOP]-[MIDDLE-LEFT]: (2x4),
# and PANEL-1: ... without brackets (all 116 1x5 and 5 1x7 prompts).
LAYOUT_SAMPLE = Path(__file__).parent / "data" / "t2is_layouts_sample.jsonl"


def _records(t2is_path):
    return [json.loads(line) for line in t2is_path.read_text().splitlines()]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("FOUR-PANEL Images with a 2x2 grid layout A woman", (2, 2)),
        ("1x5", (1, 5)),
        ("2 ⨉ 3", (2, 3)),
        ("a 1×4 strip", (1, 4)),
        ("2 X 5 grid", (2, 5)),
        ("2*2", (2, 2)),
        ((2, 3), (2, 3)),
    ],
)
def test_parse_layout_forms(text, expected):
    assert parse_layout(text) == expected


@pytest.mark.parametrize(
    "bad, match",
    [
        ("no layout here", "No grid layout"),
        ("0x3", "positive"),
        ((2, 0), "positive"),
        (5, "string like '2x2'"),
    ],
)
def test_parse_layout_errors(bad, match):
    with pytest.raises(LayoutError, match=match):
        parse_layout(bad)


def test_every_real_t2is_prompt_splits_into_its_layout(t2is_path):
    records = _records(t2is_path)
    assert len(records) == 150
    for r in records:
        rows, cols = parse_layout(r["prompt"])
        assert (rows, cols) == parse_layout(r["layout"])
        global_description, panels = split_panel_prompts(r["prompt"], expected=rows * cols)
        assert global_description.startswith("FOUR-PANEL Images with a 2x2 grid layout")
        assert all(p and "[" not in p[:3] for p in panels)
        # Row-major: the markers appear in the order TOP-LEFT, TOP-RIGHT, BOTTOM-LEFT, BOTTOM-RIGHT.
        markers = re.findall(r"\[(TOP|BOTTOM)\]-\[(LEFT|RIGHT)\]:", r["prompt"])
        assert markers == [
            ("TOP", "LEFT"),
            ("TOP", "RIGHT"),
            ("BOTTOM", "LEFT"),
            ("BOTTOM", "RIGHT"),
        ]
        # The panel text is exactly what follows its marker.
        first = r["prompt"].split("[TOP]-[RIGHT]:")[0].split("[TOP]-[LEFT]:")[1].strip()
        assert panels[0] == first


def test_real_prompts_of_every_layout_and_marker_form_split_into_their_layout():
    records = _records(LAYOUT_SAMPLE)
    assert {r["layout"] for r in records} == {"1x2", "1x3", "2x2", "1x5", "2x3", "1x7", "2x4"}
    for r in records:
        rows, cols = parse_layout(r["layout"])
        assert parse_layout(r["prompt"]) == (rows, cols)
        global_description, panels = split_panel_prompts(r["prompt"], expected=rows * cols)
        assert re.match(
            rf"[A-Z]+-PANEL Images with a {rows}x{cols} grid layout", global_description
        )
        markers = find_panel_markers(r["prompt"])
        if cols > 4:  # long strips number their panels, without brackets
            assert markers == [f"PANEL-{k + 1}:" for k in range(rows * cols)]
        elif cols == 4:  # 2x4 names its inner columns
            names = ["LEFT", "MIDDLE-LEFT", "MIDDLE-RIGHT", "RIGHT"]
            assert markers == [f"[{v}]-[{h}]:" for v in ("TOP", "BOTTOM") for h in names]
        else:
            assert markers == panel_markers(rows, cols)
        # Each panel text is exactly what its marker introduces, none left unsplit.
        for k, panel in enumerate(panels):
            start = r["prompt"].index(markers[k]) + len(markers[k])
            end = r["prompt"].index(markers[k + 1]) if k + 1 < len(markers) else None
            assert panel == r["prompt"][start:end].strip() and panel
            assert not find_panel_markers(panel)


# Each marker form, as a row-major list of markers.
MARKER_FORMS = {
    "named": ["[TOP]-[LEFT]:", "[TOP]-[RIGHT]:", "[BOTTOM]-[LEFT]:", "[BOTTOM]-[RIGHT]:"],
    "named, joined": ["[TOP-LEFT]:", "[TOP-RIGHT]:", "[BOTTOM-LEFT]:", "[BOTTOM-RIGHT]:"],
    "named, 2x4": ["[TOP]-[LEFT]:", "[TOP]-[MIDDLE-LEFT]:", "[TOP]-[MIDDLE-RIGHT]:", "[TOP]-[RIGHT]:"],
    "named, lower case and spaced": ["[ top ] - [ left ] :", "[Top]-[Right] :", "[bottom]-[left]:"],
    "strip": ["[LEFT]:", "[MIDDLE]:", "[RIGHT]:"],
    "bracketed number": ["[PANEL-1]:", "[PANEL-2]:", "[PANEL 3]:", "[4]:", "[Panel_5]:"],
    "bare number": ["PANEL-1:", "PANEL-2:", "PANEL-3:", "PANEL-4:", "PANEL-5:"],
    "bare number, any case and spacing": ["Panel 1:", "panel-2 :", "PANEL_3:", "Panel4:", "PANEL - 5:"],
    "mixed": ["[TOP]-[LEFT]:", "PANEL-2:", "[PANEL-3]:", "panel 4:"],
}  # fmt: skip


@pytest.mark.parametrize("form", list(MARKER_FORMS))
@pytest.mark.parametrize("glue", [" ", "", "\n"], ids=["spaced", "glued", "newline"])
def test_every_marker_form_splits_into_one_panel_per_marker(form, glue):
    markers = MARKER_FORMS[form]
    texts = [f"{chr(ord('a') + k)} fox, panel {k + 1}." for k in range(len(markers))]
    prompt = "Images of a fox." + "".join(f"{glue}{m}{glue}{t}" for m, t in zip(markers, texts))
    assert find_panel_markers(prompt) == markers
    assert split_panel_prompts(prompt, expected=len(markers)) == ("Images of a fox.", texts)


@pytest.mark.parametrize(
    "prose",
    [
        "SIX-PANEL Images with a 2x3 grid layout",  # the header names "PANEL" without a number
        "the damage shows on panel 4. It grows",  # a panel named in prose, no colon
        "Note: the style is warm.",  # a colon after a word is not a marker
        "on exoplanet PZ-9.All images",  # a real global description
        "ratio 16:9 at 10:30, see PANEL-123: x",  # numbers and an implausible panel number
    ],
)
def test_prose_is_not_a_panel_marker(prose):
    assert split_panel_prompts(prose) == (prose, [])


def test_a_stray_marker_in_prose_is_counted_not_silent():
    prompt = "A fox. PANEL-1: runs to panel 2: the den. PANEL-2: sleeps."
    with pytest.raises(PromptError, match=r"Expected 2 .* found 3 .*'panel 2:'"):
        split_panel_prompts(prompt, expected=2)


@pytest.mark.parametrize("rows, cols", LAYOUTS)
def test_real_prompts_rewritten_in_every_layout_round_trip(t2is_path, rows, cols):
    """Real T2IS descriptions, re-laid out as 1xN / 2xN prompts, split back exactly."""
    records = _records(t2is_path)[:20]
    for r in records:
        global_description, panels = split_panel_prompts(r["prompt"], expected=4)
        body = global_description.split("grid layout", 1)[1].strip()
        texts = [panels[k % 4] for k in range(rows * cols)]
        prompt = format_grid_prompt(body, texts, rows, cols)
        assert parse_layout(prompt) == (rows, cols)
        back_global, back_panels = split_panel_prompts(prompt, expected=rows * cols)
        assert back_panels == texts
        assert back_global.endswith(body)


def test_panel_markers_named_and_numbered():
    assert panel_markers(1, 2) == ["[LEFT]:", "[RIGHT]:"]
    assert panel_markers(2, 3)[4] == "[BOTTOM]-[MIDDLE]:"
    assert panel_markers(2, 5)[7] == "[PANEL-8]:"
    assert len(set(panel_markers(2, 4))) == 8


def test_split_panel_prompts_other_marker_styles():
    text = "A fox. [Top-Left]: runs. [TOP-RIGHT]: eats. [PANEL 3]: sleeps. [4]: wakes."
    assert split_panel_prompts(text) == ("A fox.", ["runs.", "eats.", "sleeps.", "wakes."])
    assert split_panel_prompts("just one image of a fox") == ("just one image of a fox", [])


def test_split_panel_prompts_errors():
    with pytest.raises(PromptError, match="Expected 4 panel descriptions"):
        split_panel_prompts("A fox. [LEFT]: a. [RIGHT]: b.", expected=4)
    with pytest.raises(PromptError, match="must be a string"):
        split_panel_prompts(None)
    with pytest.raises(PromptError, match="needs 6 panel descriptions"):
        format_grid_prompt("x", ["a"], 2, 3)


@pytest.mark.parametrize("rows, cols", LAYOUTS)
def test_split_grid_row_major(rows, cols):
    size = 8
    grid = np.zeros((rows * size, cols * size, 3), dtype=np.uint8)
    for k in range(rows * cols):
        r, c = divmod(k, cols)
        grid[r * size : (r + 1) * size, c * size : (c + 1) * size] = (k * 20, 255 - k * 20, k)
    panels = split_grid(Image.fromarray(grid), rows, cols)
    assert len(panels) == rows * cols
    for k, panel in enumerate(panels):
        assert panel.size == (size, size)
        assert panel.getpixel((3, 3)) == (k * 20, 255 - k * 20, k)


def released_divide_image(image: Image.Image, grid_info: tuple[int, int]) -> list[Image.Image]:
    """The released PaCo-GRPO ``divide_image`` (``PaCo-GRPO/paco_grpo/utils.py``), restated:
    floor-divided cells from the top-left, row-major."""
    a, b = grid_info
    cell_h, cell_w = image.height // a, image.width // b
    return [
        image.crop((j * cell_w, i * cell_h, (j + 1) * cell_w, (i + 1) * cell_h))
        for i in range(a)
        for j in range(b)
    ]


@pytest.mark.parametrize("rows, cols", [(1, 2), (1, 3), (1, 4), (2, 2), (2, 3), (2, 4)])
@pytest.mark.parametrize("off", [(-1, 0), (0, -2), (1, 1), (2, -1), (-2, 2)])
def test_grids_a_pixel_or_two_off_are_cut_like_the_released_code(rows, cols, off, caplog):
    rng = np.random.default_rng(rows * 10 + cols)
    width, height = cols * 96 + off[0], rows * 96 + off[1]
    grid = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    with caplog.at_level("WARNING", logger="paco_reward.grids"):
        panels = split_grid(grid, rows, cols, name="resaved.png")
        split_grid(grid, rows, cols, name="resaved.png")
    expected = released_divide_image(grid, (rows, cols))
    assert len({p.size for p in panels}) == 1
    assert [np.asarray(p).tobytes() for p in panels] == [np.asarray(e).tobytes() for e in expected]
    dropped = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    remainder = (width % cols, height % rows)
    if remainder == (0, 0):
        assert not dropped
    else:  # logged once, naming the image and the pixels dropped
        assert len(dropped) == 1 and "resaved.png" in dropped[0]
        assert f"dropping {remainder[0]} px on the right and {remainder[1]} px" in dropped[0]


def test_a_thousand_pixel_strip_cuts_into_three():
    panels = split_grid(Image.new("RGB", (1000, 300)), 1, 3)
    assert [p.size for p in panels] == [(333, 300)] * 3


@pytest.mark.parametrize(
    "size, rows, cols", [((100, 64), 2, 7), ((150, 100), 1, 4), ((96, 90), 4, 1), ((3, 64), 1, 4)]
)
def test_split_grid_refuses_a_large_remainder(size, rows, cols):
    with pytest.raises(LayoutError, match=f"cannot be cut into a {rows}x{cols} grid"):
        split_grid(Image.new("RGB", size), rows, cols)
