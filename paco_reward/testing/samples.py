"""Sample images for a first try: two panels of one red circle and a 2x2 grid of four
panels, the files the README's quickstart scores (``paco-reward tiny DIR --panels .``)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

__all__ = ["SAMPLE_PANELS", "write_sample_panels"]

# The files written, in order: the README's quickstart names them.
SAMPLE_PANELS = ("panel_1.png", "panel_2.png", "grid.png")


def _panel(colour: str, size: int = 64) -> Image.Image:
    image = Image.new("RGB", (size, size), "white")
    ImageDraw.Draw(image).ellipse((12, 12, size - 12, size - 12), fill=colour)
    return image


def write_sample_panels(folder: str | Path) -> list[Path]:
    """Write ``panel_1.png`` and ``panel_2.png`` (a red and a dark red circle, 64 px) and
    ``grid.png`` (a 2x2 grid of such panels, one of them blue) to ``folder``; their paths.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     [p.name for p in write_sample_panels(folder)]
        ['panel_1.png', 'panel_2.png', 'grid.png']
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in SAMPLE_PANELS]
    _panel("red").save(paths[0])
    _panel("darkred").save(paths[1])
    grid = Image.new("RGB", (128, 128))
    for i, colour in enumerate(("red", "darkred", "red", "blue")):
        grid.paste(_panel(colour), ((i % 2) * 64, (i // 2) * 64))
    grid.save(paths[2])
    return paths
