"""An ORACLE of the synthetic world: read a panel's attributes back from its pixels.

:func:`read_panel` inverts :func:`data_pipeline.synthetic.render_panel` with pixel
statistics: the background's colour gives the palette (and the panel's shade), the
character's fill colour its colour, the fill's silhouette its shape, a ring of line colour
around it the outline, the marking's blobs inside it the marking, the ink on the background
the texture, and the pips along the bottom edge the step. It knows the world's palette of
colours, nothing learned, so it can judge images from any generator of the world: it is the
judge of the RL experiments (a ground truth of consistency for generated grids), never a
reward.

    >>> from data_pipeline.synthetic import PanelSpec, render_panel
    >>> spec = PanelSpec("triangle", "blue", "stripes", "cool", "hatch", 3, 2)
    >>> read_panel(render_panel(spec, seed=7)) == spec
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

from data_pipeline.storage import DataPipelineError
from data_pipeline.synthetic import (
    ATTRIBUTES,
    COLOURS,
    INK,
    LINE,
    PALETTES,
    PanelSpec,
    SyntheticWorld,
    panel_similarity,
)
from paco_reward.errors import InputError

# A pixel belongs to a colour when it is this close to it (RGB Euclidean distance).
COLOUR_RADIUS = 70.0
# Fewer pixels than this fraction of the character's area means "not there".
MIN_FRACTION = 0.02


def _distance(pixels: np.ndarray, colour: Sequence[int]) -> np.ndarray:
    return np.linalg.norm(pixels - np.asarray(colour, dtype=np.float32), axis=-1)


def _components(mask: np.ndarray, min_size: int = 1) -> list[np.ndarray]:
    """Boolean masks of the 8-connected components of ``mask`` with ≥ ``min_size`` pixels."""
    labels, count = ndimage.label(mask, structure=np.ones((3, 3)))
    sizes = ndimage.sum(mask, labels, range(1, count + 1))
    return [labels == k + 1 for k in range(count) if sizes[k] >= min_size]


def _convex_hull(mask: np.ndarray) -> np.ndarray:
    """The pixels of the convex hull of ``mask`` (pixel centres inside or on it)."""
    from scipy.spatial import ConvexHull, QhullError

    points = np.argwhere(mask).astype(np.float64)
    try:
        hull = ConvexHull(points)
    except QhullError:  # a line or a point: nothing to fill
        return mask.copy()
    grid = np.indices(mask.shape).reshape(2, -1).T.astype(np.float64)
    inside = (grid @ hull.equations[:, :2].T + hull.equations[:, 2] <= 0.5).all(axis=1)
    return inside.reshape(mask.shape)


def _shape(fill: np.ndarray) -> str:
    """Circle, square, triangle or diamond from the filled silhouette: how much of its
    bounding box it covers, and where its widest row is."""
    ys, xs = np.nonzero(fill)
    box = fill[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]
    coverage = box.mean()
    if coverage > 0.9:
        return "square"
    if coverage > 0.74:
        return "circle"
    widths = box.sum(axis=1)
    widest = np.flatnonzero(widths >= 0.9 * widths.max()).mean() / max(1, len(widths) - 1)
    return "triangle" if widest > 0.72 else "diamond"


def _marking(marks: list[np.ndarray], area: int) -> str:
    """Plain, dots, stripes or cross from the blobs of marking colour inside the character."""
    blobs = [m for m in marks if m.sum() >= max(2, MIN_FRACTION * area)]
    if not blobs:
        return "plain"
    if len(blobs) >= 3:
        return "stripes"
    if len(blobs) == 2:
        # Two dots sit side by side; two stripes (the third lost at an edge) one above the other.
        (ya, xa), (yb, xb) = (np.argwhere(b).mean(axis=0) for b in blobs)
        return "dots" if abs(xa - xb) > abs(ya - yb) else "stripes"
    ys, xs = np.nonzero(blobs[0])
    height, width = np.ptp(ys) + 1, np.ptp(xs) + 1
    # A stripe is much wider than tall; a cross about as tall as wide, and sparse in its box.
    if width > 2.2 * height:
        return "stripes"
    return "cross" if blobs[0].sum() < 0.75 * height * width else "dots"


def read_panel(image: Image.Image | np.ndarray) -> PanelSpec:
    """The :class:`~data_pipeline.synthetic.PanelSpec` a panel of the world shows.

    Args:
        image: one square panel (PIL image or ``H x W x 3`` uint8 array), any size.

    Raises:
        ValueError: ``image`` is not a 3-channel square panel.
    """
    pixels = np.asarray(image.convert("RGB") if isinstance(image, Image.Image) else image)
    if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.shape[0] != pixels.shape[1]:
        raise InputError(f"read_panel: image must be a square RGB panel; got {pixels.shape}.")
    pixels = pixels.astype(np.float32)
    size = pixels.shape[0]
    pip = max(2, size // 20)
    pip_top = size - pip * 2 - 1

    # Background: the most common colour of the panel's edge (the character never touches it).
    edge = np.concatenate([pixels[0], pixels[:pip_top, 0], pixels[:pip_top, -1]])
    backgrounds = [(p, s, c) for p, table in PALETTES.items() for s, c in table.items()]
    nearest = np.stack([_distance(edge, c) for _, _, c in backgrounds]).argmin(axis=0)
    palette, shade, background = backgrounds[np.bincount(nearest).argmax()]
    background = np.asarray(background, dtype=np.float32)

    # Character: pixels of one of the six colours; its colour is the most common one.
    near = np.stack([_distance(pixels, c) < COLOUR_RADIUS for c in COLOURS.values()])
    near &= (_distance(pixels, background) > COLOUR_RADIUS / 2)[None]
    colour_index = int(near.sum(axis=(1, 2)).argmax())
    colour = list(COLOURS)[colour_index]
    # Markings may cut the body in pieces (a cross, stripes across a diamond) or bite into
    # its edge (dots in a triangle): a closing joins the pieces, and as every shape of the
    # world is convex, the silhouette is the convex hull of the largest piece.
    closed = ndimage.binary_closing(near[colour_index], np.ones((3, 3)), iterations=3)
    found = _components(closed)
    if not found:
        raise DataPipelineError("read_panel: no character of any world colour in the image.")
    fill = _convex_hull(max(found, key=lambda m: m.sum()))
    body = fill & near[colour_index]
    area = int(fill.sum())

    # Marking: blobs of the marking colour inside the character's fill.
    mark_colour = (30, 30, 30) if colour == "yellow" else (255, 255, 255)
    marks = _components(fill & ~body & (_distance(pixels, mark_colour) < COLOUR_RADIUS / 2))

    # Outline: a ring of the shade's line colour just outside the fill.
    ring = ndimage.binary_dilation(fill, iterations=2) & ~fill
    on_line = _distance(pixels, LINE[shade]) < COLOUR_RADIUS
    outline = 3 if on_line[ring].mean() > 0.5 else 0

    # Texture: ink on the background around the character, and whether it lies in the
    # hatch's diagonal bands (x + y constant modulo 8) or scatters (grain).
    around = ~ndimage.binary_dilation(fill, iterations=4)
    around[pip_top - 1 :] = False
    ink = around & (_distance(pixels, INK[shade]) < COLOUR_RADIUS / 2)
    texture = "plain"
    if ink.sum() > 0.03 * around.sum():
        ys, xs = np.nonzero(ink)
        bands = np.bincount((xs + ys) % 8, minlength=8)
        top_three = np.sort(bands)[-3:].sum() / bands.sum()
        texture = "hatch" if top_three > 0.6 else "grain"

    # Step: pips, squares of line colour along the bottom edge.
    bottom = np.zeros_like(on_line)
    bottom[pip_top - 1 : pip_top + pip + 1] = on_line[pip_top - 1 : pip_top + pip + 1]
    pips = _components(bottom, min_size=max(2, pip * pip // 2))
    return PanelSpec(
        shape=_shape(fill),
        colour=colour,
        marking=_marking(marks, area),
        palette=palette,
        texture=texture,
        outline=outline,
        step=max(0, len(pips) - 1),
    )


def grid_consistency(panels: Sequence[PanelSpec]) -> float:
    """Ground-truth consistency of a set of panels: the mean
    :func:`~data_pipeline.synthetic.panel_similarity` over every pair (1.0 = one character
    in one style throughout)."""
    pairs = list(combinations(panels, 2))
    if not pairs:
        raise InputError("grid_consistency needs at least two panels.")
    return float(np.mean([panel_similarity(a, b) for a, b in pairs]))


def prompt_alignment(panels: Sequence[PanelSpec], attributes: dict) -> float:
    """How well the panels follow their prompt: the fraction of (panel, attribute) places
    where the panel shows the prompt's attribute (``attributes``: the prompt record's
    ``synthetic["attributes"]``), pips included (panel ``k`` should show ``k + 1``)."""
    hits = [
        [getattr(p, key) == attributes[key] for key in ATTRIBUTES] + [p.step == k]
        for k, p in enumerate(panels)
    ]
    return float(np.mean(hits))


def read_back_grids(work: str | Path, world: SyntheticWorld, limit: int | None = None) -> dict:
    """Read the grid images of a synthetic pipeline folder (``grids.jsonl``, ``prompts.jsonl``)
    back with :func:`read_panel` and compare with the world's ground truth.

    Returns:
        ``{"grids": n, "panels": n, "accuracy": {attribute: fraction read right},
        "same_consistency": grids whose read-back :func:`grid_consistency` equals the truth}``.
    """
    from data_pipeline.generate import GRIDS_FILE
    from data_pipeline.prompts import read_prompts
    from data_pipeline.storage import read_jsonl
    from paco_reward.grids import split_grid
    from paco_reward.images import load_image

    prompts = read_prompts(work)
    records = read_jsonl(Path(work) / GRIDS_FILE)[:limit]
    if not records:
        raise DataPipelineError(
            f"read_back_grids: {Path(work) / GRIDS_FILE} lists no grid to read."
        )
    keys = (*ATTRIBUTES, "step")
    hits = dict.fromkeys(keys, 0)
    panels = same = 0
    for grid in records:
        truth = world.panel_specs(prompts[grid["prompt_id"]], int(grid["grid"]))
        image = load_image(grid["path"], grid["path"])
        read = [read_panel(p) for p in split_grid(image, grid["rows"], grid["cols"])]
        for got, want in zip(read, truth):
            for key in keys:
                hits[key] += getattr(got, key) == getattr(want, key)
        panels += len(truth)
        same += abs(grid_consistency(read) - grid_consistency(truth)) < 1e-9
    return {
        "grids": len(records),
        "panels": panels,
        "accuracy": {key: hits[key] / panels for key in keys},
        "same_consistency": same,
    }


class OracleReadings:
    """What the oracle reads in every panel of a work folder's grids: the "ground truth" of
    grids a generator of the world drew, which has none. It answers ``panel_specs`` as
    :class:`~data_pipeline.synthetic.SyntheticWorld` does, so
    :class:`~data_pipeline.synthetic.SimulatedAnnotators` and
    :func:`~data_pipeline.synthetic.attribute_describer` rank and describe generated panels
    as they do rendered ones; a panel it cannot read is ``None``.

    Args:
        work: a pipeline folder whose ``grids.jsonl`` lists the grids (after ``ingest_grids``).
    """

    def __init__(self, work: str | Path) -> None:
        from data_pipeline.generate import GRIDS_FILE
        from data_pipeline.storage import read_jsonl

        self.grids = {
            (g["prompt_id"], str(g["grid"])): g for g in read_jsonl(Path(work) / GRIDS_FILE)
        }
        self._read: dict[tuple[str, str], list[PanelSpec | None]] = {}

    def panel_specs(self, record: dict, grid_seed: int | str) -> list[PanelSpec | None]:
        """The oracle's reading of every panel (row-major) of grid ``grid_seed`` of ``record``."""
        from paco_reward.grids import split_grid
        from paco_reward.images import load_image

        key = (record["idx"], str(grid_seed))
        if key not in self._read:
            if key not in self.grids:
                raise DataPipelineError(
                    f"no grid {grid_seed!r} of prompt {record['idx']!r} in grids.jsonl."
                )
            grid = self.grids[key]
            image = load_image(grid["path"], grid["path"])
            readings: list[PanelSpec | None] = []
            for panel in split_grid(image, grid["rows"], grid["cols"]):
                try:
                    readings.append(read_panel(panel))
                except ValueError:
                    readings.append(None)
            self._read[key] = readings
        return self._read[key]

    def readable(self, instance: dict, prompts: dict[str, dict]) -> bool:
        """Whether the oracle reads the reference and every candidate of ``instance``."""
        record = prompts[instance["prompt_id"]]
        panels = [instance["reference"], *instance["candidates"]]
        return all(self.panel_specs(record, p["grid"])[p["pos"]] is not None for p in panels)
