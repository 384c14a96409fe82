"""Grid layouts, grid cutting and per-panel prompts (T2IS format).

A T2IS grid prompt names its layout ("FOUR-PANEL Images with a 2x2 grid layout"),
gives a shared description, then one description per panel after a marker such
as ``[TOP]-[LEFT]:``. Panels are always in row-major order.

    >>> parse_layout("Images with a 2x2 grid layout")
    (2, 2)
    >>> parse_layout("1 ⨉ 5")
    (1, 5)
    >>> split_panel_prompts("A cat.  [LEFT]: sleeping. [RIGHT]: eating.")
    ('A cat.', ['sleeping.', 'eating.'])
"""

from __future__ import annotations

import re

from PIL import Image

from paco_reward.errors import LayoutError

# "2x2", "2 x 3", "1×5", "2 ⨉ 3", "2*2", "2X2"
_LAYOUT = re.compile(r"(?<!\d)(\d{1,2})\s*[xX×⨉✕*]\s*(\d{1,2})(?!\d)")
# "[TOP]-[LEFT]:", "[TOP-LEFT]:", "[LEFT]:", "[PANEL 3]:", "[1]:"
_PANEL_MARKER = re.compile(r"\[[A-Z0-9][A-Z0-9 _-]*\](?:\s*-\s*\[[A-Z0-9][A-Z0-9 _-]*\])*\s*:")


def parse_layout(text: str | tuple[int, int]) -> tuple[int, int]:
    """(rows, cols) from a layout string or a grid prompt that names one.

    Raises:
        LayoutError: if no ``RxC`` layout is found or a side is zero.
    """
    if isinstance(text, tuple):
        rows, cols = text
    else:
        if not isinstance(text, str):
            raise LayoutError(
                f"layout must be a string like '2x2' or a (rows, cols) tuple; got {text!r}."
            )
        match = _LAYOUT.search(text)
        if match is None:
            raise LayoutError(
                f"No grid layout such as '2x2' or '1x4' found in {text[:120]!r}; "
                "pass layout=(rows, cols) explicitly."
            )
        rows, cols = int(match.group(1)), int(match.group(2))
    if not (isinstance(rows, int) and isinstance(cols, int)) or rows < 1 or cols < 1:
        raise LayoutError(f"layout sides must be positive integers; got {(rows, cols)!r}.")
    return rows, cols


def split_grid(image: Image.Image, rows: int, cols: int, name: str = "grid") -> list[Image.Image]:
    """Cut a grid image into ``rows * cols`` panels in row-major order.

    Raises:
        LayoutError: if the image size is not divisible by the layout.
    """
    rows, cols = parse_layout((rows, cols))
    width, height = image.size
    if width % cols or height % rows:
        raise LayoutError(
            f"{name}: a {width}x{height} image cannot be cut into a {rows}x{cols} grid "
            f"({width} % {cols} = {width % cols}, {height} % {rows} = {height % rows}); "
            "check the layout or crop the image."
        )
    pw, ph = width // cols, height // rows
    return [
        image.crop((c * pw, r * ph, (c + 1) * pw, (r + 1) * ph))
        for r in range(rows)
        for c in range(cols)
    ]


def split_panel_prompts(prompt: str) -> tuple[str, list[str]]:
    """Split a T2IS grid prompt into (global description, [panel descriptions]).

    The global description is the text before the first panel marker; without markers
    the whole prompt is global and the panel list is empty.
    """
    pieces = _PANEL_MARKER.split(prompt)
    global_description = pieces[0].strip()
    panels = [p.strip() for p in pieces[1:]]
    return global_description, panels
