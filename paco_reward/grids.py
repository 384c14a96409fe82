"""Grid layouts, grid cutting and per-panel prompts (T2IS format).

A T2IS grid prompt names its layout ("FOUR-PANEL Images with a 2x2 grid layout"),
gives a shared description, then one description per panel after a marker. Panels are
always in row-major order. Real T2IS prompts mark panels by position up to 3 a side
(``[LEFT]:``, ``[TOP]-[LEFT]:``, ``[TOP]-[MIDDLE-LEFT]:``) and by number in longer
strips (``PANEL-1:``, without brackets); ``[PANEL-4]:``, ``Panel 2:``, ``[Top-Left]:``
and other cases and spacings split the same way.

    >>> parse_layout("Images with a 2x2 grid layout")
    (2, 2)
    >>> parse_layout("1 ⨉ 5")
    (1, 5)
    >>> split_panel_prompts("A cat.  [LEFT]: sleeping. [RIGHT]: eating.")
    ('A cat.', ['sleeping.', 'eating.'])
    >>> split_panel_prompts("A cat. PANEL-1:sleeps. PANEL-2:eats. PANEL-3:runs.")[1]
    ['sleeps.', 'eats.', 'runs.']
"""

from __future__ import annotations

import logging
import re

from PIL import Image

from paco_reward.errors import LayoutError, PromptError

logger = logging.getLogger(__name__)

# "2x2", "2 x 3", "1×5", "2 ⨉ 3", "2*2", "2X2"
_LAYOUT = re.compile(r"(?<!\d)(\d{1,2})\s*[xX×⨉✕*]\s*(\d{1,2})(?!\d)")
# Bracketed: "[TOP]-[LEFT]:", "[TOP]-[MIDDLE-LEFT]:", "[TOP-LEFT]:", "[LEFT]:", "[PANEL 3]:",
# "[1]:", "[Top]-[Right]:". Bare, numbered (real 1x5 and 1x7 T2IS prompts): "PANEL-1:",
# "Panel 2:", "panel_3 :". Any case. A bare marker needs "panel" and a number so that prose
# such as "Note:" is never one; a stray match is caught by the panel count, not silent.
_PANEL_MARKER = re.compile(
    r"(?:\[\s*[A-Za-z0-9][A-Za-z0-9 _-]*\](?:\s*-\s*\[\s*[A-Za-z0-9][A-Za-z0-9 _-]*\])*"
    r"|\bpanel[\s_-]*\d{1,2}(?!\d))\s*:",
    re.IGNORECASE,
)

_NUMBER_WORDS = {
    1: "ONE", 2: "TWO", 3: "THREE", 4: "FOUR", 5: "FIVE", 6: "SIX", 7: "SEVEN", 8: "EIGHT",
    9: "NINE", 10: "TEN", 11: "ELEVEN", 12: "TWELVE",
}  # fmt: skip
_SIDE_NAMES = {1: [], 2: ["LEFT", "RIGHT"], 3: ["LEFT", "MIDDLE", "RIGHT"]}
_ROW_NAMES = {1: [], 2: ["TOP", "BOTTOM"], 3: ["TOP", "MIDDLE", "BOTTOM"]}


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


# A grid whose size is off the layout by more than this share of a panel is refused.
MAX_REMAINDER_SHARE = 0.05
_reported_remainders: set[tuple[tuple[int, int], tuple[int, int]]] = set()


def split_grid(image: Image.Image, rows: int, cols: int, name: str = "grid") -> list[Image.Image]:
    """Cut a grid image into ``rows * cols`` equal panels in row-major order.

    Like the released PaCo-RL code (``divide_image``), panels are ``width // cols`` by
    ``height // rows`` pixels from the top-left corner, and a remainder of a few pixels on
    the right or bottom edge (a 1000-px-wide 1x3 grid, a re-saved grid a pixel off) is
    dropped, logged once per image size and layout.

    Raises:
        LayoutError: if the remainder is more than 5 % of a panel's side (the layout is
            probably wrong), or a panel would be empty.

    Example:
        >>> [p.size for p in split_grid(Image.new("RGB", (1000, 300)), 1, 3)]
        [(333, 300), (333, 300), (333, 300)]
    """
    rows, cols = parse_layout((rows, cols))
    width, height = image.size
    pw, ph = width // cols, height // rows
    extra_w, extra_h = width - pw * cols, height - ph * rows
    if (
        pw == 0
        or ph == 0
        or extra_w > MAX_REMAINDER_SHARE * pw
        or extra_h > MAX_REMAINDER_SHARE * ph
    ):
        raise LayoutError(
            f"{name}: a {width}x{height} image cannot be cut into a {rows}x{cols} grid: "
            f"{extra_w} px of width and {extra_h} px of height would be left over, more than "
            f"{MAX_REMAINDER_SHARE:.0%} of a {pw}x{ph} panel; check the layout or crop the image."
        )
    if extra_w or extra_h:
        key = ((width, height), (rows, cols))
        if key not in _reported_remainders:
            _reported_remainders.add(key)
            logger.warning(
                "%s: a %dx%d image is not divisible by the %dx%d layout; cutting %dx%d panels and "
                "dropping %d px on the right and %d px at the bottom (logged once per size).",
                name, width, height, rows, cols, pw, ph, extra_w, extra_h,
            )  # fmt: skip
    return [
        image.crop((c * pw, r * ph, (c + 1) * pw, (r + 1) * ph))
        for r in range(rows)
        for c in range(cols)
    ]


def split_panel_prompts(prompt: str, expected: int | None = None) -> tuple[str, list[str]]:
    """Split a T2IS grid prompt into (global description, [panel descriptions]).

    The global description is the text before the first panel marker; without markers
    the whole prompt is global and the panel list is empty (pass ``expected`` to refuse
    that). Panels come in the order they are written, which T2IS writes row-major. Every
    marker form in the module docstring splits, in any case and spacing.

    Args:
        prompt: the full grid prompt.
        expected: if given (``rows * cols``), the number of panel descriptions required.

    Raises:
        PromptError: if ``prompt`` is not a string, or ``expected`` is given and the prompt
            has a different number of panel descriptions.

    Example:
        >>> split_panel_prompts("Two cats. [TOP]-[LEFT]:a. [TOP]-[RIGHT]:b.", expected=2)[1]
        ['a.', 'b.']
        >>> split_panel_prompts("Five cats. PANEL-1:a. PANEL-2:b.")
        ('Five cats.', ['a.', 'b.'])
    """
    if not isinstance(prompt, str):
        raise PromptError(f"grid prompt must be a string; got {type(prompt).__name__}.")
    pieces = _PANEL_MARKER.split(prompt)
    global_description = pieces[0].strip()
    panels = [p.strip() for p in pieces[1:]]
    if expected is not None and len(panels) != expected:
        raise PromptError(
            f"Expected {expected} panel descriptions (one per grid cell) but found "
            f"{len(panels)} in {prompt[:120]!r} (markers: {find_panel_markers(prompt)}); "
            "mark each panel with e.g. '[TOP]-[LEFT]:' or 'PANEL-1:'."
        )
    return global_description, panels


def find_panel_markers(prompt: str) -> list[str]:
    """The panel markers of a grid prompt as written, in order (what
    :func:`split_panel_prompts` splits on; for error messages).

    Example:
        >>> find_panel_markers("A fox. [TOP]-[LEFT]: runs. Panel 2 : eats.")
        ['[TOP]-[LEFT]:', 'Panel 2 :']
    """
    return _PANEL_MARKER.findall(prompt)


def panel_markers(rows: int, cols: int) -> list[str]:
    """The T2IS panel markers of a layout, row-major (``[TOP]-[LEFT]:`` ... ).

    Rows and columns of up to 3 are named (TOP/MIDDLE/BOTTOM, LEFT/MIDDLE/RIGHT); longer
    sides are numbered (``[PANEL-4]:``).

    >>> panel_markers(1, 3)
    ['[LEFT]:', '[MIDDLE]:', '[RIGHT]:']
    >>> panel_markers(2, 2)[1]
    '[TOP]-[RIGHT]:'
    """
    rows, cols = parse_layout((rows, cols))
    if rows > 3 or cols > 3:
        return [f"[PANEL-{k + 1}]:" for k in range(rows * cols)]
    markers = []
    for r in range(rows):
        for c in range(cols):
            names = [n for n in (_ROW_NAMES[rows][r : r + 1] + _SIDE_NAMES[cols][c : c + 1])]
            markers.append("-".join(f"[{n}]" for n in names) + ":" if names else "[PANEL-1]:")
    return markers


def format_grid_prompt(global_description: str, panels: list[str], rows: int, cols: int) -> str:
    """Write a T2IS-style grid prompt (the inverse of :func:`split_panel_prompts`).

    Raises:
        PromptError: if the number of panel descriptions is not ``rows * cols``.

    Example:
        >>> format_grid_prompt("A fox.", ["runs.", "sleeps."], 1, 2)
        'TWO-PANEL Images with a 1x2 grid layout A fox. [LEFT]:runs. [RIGHT]:sleeps.'
    """
    rows, cols = parse_layout((rows, cols))
    if len(panels) != rows * cols:
        raise PromptError(
            f"A {rows}x{cols} grid needs {rows * cols} panel descriptions; got {len(panels)}."
        )
    count = _NUMBER_WORDS.get(rows * cols, str(rows * cols))
    header = f"{count}-PANEL Images with a {rows}x{cols} grid layout"
    body = " ".join(f"{m}{p}" for m, p in zip(panel_markers(rows, cols), panels))
    return f"{header} {global_description.strip()} {body}"
