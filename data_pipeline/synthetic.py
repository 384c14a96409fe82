"""A procedural world of image sets with known consistency, for tests and the demo.

SYNTHETIC DATA: nothing here is a real generator or a real annotator. Each synthetic
prompt describes a character (identity: shape, body colour, marking), a drawing
style (palette of the background, texture, outline) and a logic progression (panel k
shows k + 1 pips). A "generated" grid of that prompt renders every panel from the
prompt's attributes, except that, under seeded control, a whole grid may drift (as
different seeds of a real generator draw a different character) and single panels may
break one attribute. Ground truth is the attribute agreement of two panels.

What is drawn, not where: by default (``pose=True``, ``lighting=True``) every panel
places the character at its own position and size and lights the scene at its own shade
(light, mid or dark) of the palette, as the same character moves through a real image
set. Consistent panels are therefore no pixel copies, and pixel or embedding similarity
is close to chance on the world's ground-truth pairs; a judge has to read the attributes.
Every attribute stays readable by simple pixel statistics: the palette is the hue of
the background, the colour the character's fill, the shape its silhouette, and so on
(:func:`panel_layout` says where the renderer put everything).

Labels never leak from one image: a broken attribute is redrawn uniformly from the
same palette the prompt's own attribute came from, so every colour, shape, texture
(...) is equally frequent among consistent and inconsistent panels; only comparing
two panels tells them apart.

Public API for other stages (ground truth per panel):
:class:`PanelSpec` (a panel's attributes), :meth:`SyntheticWorld.panel_specs` (the
specs of a grid), :func:`render_panel` / :func:`panel_layout` (pixels and placement),
:func:`panel_attributes` / :func:`describe_panel` (readable values and a one-line
description), :data:`ATTRIBUTES` and :data:`CHOICES` (attribute names and values).

    >>> world = SyntheticWorld(seed=0)
    >>> prompts = world.make_prompts(2)
    >>> grid = world.render_grid(prompts[0], grid_seed=0)
    >>> grid.size
    (128, 128)
    >>> describe_panel(world.panel_specs(prompts[0], 0)[0])  # doctest: +ELLIPSIS
    'Shape ..., colour ..., marking ..., palette ..., texture ..., outline ....'
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from data_pipeline.storage import DataPipelineError, save_image_atomic, stable_id, write_jsonl
from paco_reward.errors import ConfigError, InputError
from paco_reward.grids import format_grid_prompt

logger = logging.getLogger(__name__)

# Bumped whenever the drawing or the ground truth changes: anything cached from the world's
# panels (e.g. the tiny model's stand-in pretraining) keys on it.
WORLD_VERSION = 2

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 215),
    "yellow": (235, 205, 30),
    "purple": (140, 50, 190),
    "orange": (240, 130, 20),
}
# Background colour of each palette at each shade. The palette (a style attribute) is the
# background's hue; the shade is the panel's lighting, which varies from panel to panel
# (``lighting=True``) and carries no label: shades of one palette differ in pixels more
# than two palettes at one shade do.
SHADES = ("light", "mid", "dark")
PALETTES: dict[str, dict[str, tuple[int, int, int]]] = {
    "warm": {"light": (250, 232, 205), "mid": (190, 150, 115), "dark": (85, 50, 30)},
    "cool": {"light": (212, 230, 250), "mid": (110, 150, 195), "dark": (25, 45, 85)},
    "neutral": {"light": (240, 240, 240), "mid": (150, 150, 150), "dark": (35, 35, 35)},
}
# Grey ink of the texture, and the colour of outline and pips, at each shade.
INK = {"light": (80, 80, 80), "mid": (225, 225, 225), "dark": (140, 140, 140)}
LINE = {"light": (0, 0, 0), "mid": (0, 0, 0), "dark": (255, 255, 255)}
SHAPES = ["circle", "square", "triangle", "diamond"]
MARKINGS = ["plain", "dots", "stripes", "cross"]
TEXTURES = ["plain", "grain", "hatch"]
OUTLINES = [0, 3]

IDENTITY = ("shape", "colour", "marking")
STYLE = ("palette", "texture", "outline")
ATTRIBUTES = IDENTITY + STYLE
CHOICES: dict[str, list[Any]] = {
    "shape": SHAPES,
    "colour": list(COLOURS),
    "marking": MARKINGS,
    "palette": list(PALETTES),
    "texture": TEXTURES,
    "outline": OUTLINES,
}
# Prompt attributes are balanced within blocks of this many prompts (a multiple of every
# attribute's number of values).
BLOCK = 12
# Which dimension a category's grids tend to break.
CATEGORIES = {
    "identity": "Character Generation",
    "style": "Design Style Generation",
    "logic": "Process Generation",
}


@dataclass(frozen=True)
class PanelSpec:
    """The ground truth of a panel: its attributes (values from :data:`CHOICES`;
    ``outline`` is the line width in pixels, 0 = none) and ``step``, the pip count minus
    one. Where the character sits and how the scene is lit are not part of it (see
    :func:`panel_layout`)."""

    shape: str
    colour: str
    marking: str
    palette: str
    texture: str
    outline: int
    step: int

    def __post_init__(self) -> None:
        for key in ATTRIBUTES:
            if getattr(self, key) not in CHOICES[key]:
                raise InputError(
                    f"PanelSpec.{key}={getattr(self, key)!r} is not one of {CHOICES[key]}."
                )
        if not isinstance(self.step, int) or self.step < 0:
            raise InputError(f"PanelSpec.step must be an int >= 0; got {self.step!r}.")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def panel_attributes(spec: PanelSpec) -> dict[str, str]:
    """The identity and style attributes of a panel as words (``outline``: ``"thick"`` or
    ``"none"``), in :data:`ATTRIBUTES` order: what reasons and descriptions name.

    >>> panel_attributes(PanelSpec("circle", "red", "dots", "warm", "grain", 3, 0))["outline"]
    'thick'
    """
    attrs = {k: getattr(spec, k) for k in ATTRIBUTES}
    attrs["outline"] = _outline_word(spec.outline)
    return attrs


def _outline_word(width: int) -> str:
    return "thick" if width else "none"


def attribute_words() -> dict[str, list[str]]:
    """Every word :func:`panel_attributes` can give each attribute: the vocabulary of the
    pair reasons (:func:`data_pipeline.reasons.parse_attribute_comparison`).

    >>> attribute_words()["outline"]
    ['none', 'thick']
    """
    words = {k: [str(v) for v in CHOICES[k]] for k in ATTRIBUTES}
    words["outline"] = [_outline_word(width) for width in OUTLINES]
    return words


def describe_panel(spec: PanelSpec) -> str:
    """One line naming every identity and style attribute of a panel, in the words the
    pair reasons use (:func:`data_pipeline.reasons.attribute_comparison`).

    >>> describe_panel(PanelSpec("circle", "red", "dots", "warm", "grain", 3, 0))
    'Shape circle, colour red, marking dots, palette warm, texture grain, outline thick.'
    """
    text = ", ".join(f"{k} {v}" for k, v in panel_attributes(spec).items()) + "."
    return text[0].upper() + text[1:]


def _character_phrase(attrs: dict) -> str:
    return f"a {attrs['colour']} {attrs['shape']} character with {attrs['marking']} markings"


def _style_phrase(attrs: dict) -> str:
    outline = "a thick outline" if attrs["outline"] else "no outline"
    return f"drawn with {outline} on a {attrs['palette']}-toned {attrs['texture']} background"


def global_description(attrs: dict) -> str:
    """The global description of a prompt whose character and style have ``attrs``
    (:data:`ATTRIBUTES` values, as in ``record["synthetic"]["attributes"]``).

    >>> global_description(PanelSpec("circle", "red", "dots", "warm", "grain", 3, 0).as_dict())
    'A red circle character with dots markings, drawn with a thick outline on a warm-toned grain background.'
    """
    character = _character_phrase(attrs)
    return f"{character[0].upper()}{character[1:]}, {_style_phrase(attrs)}."


def panel_description(step: int) -> str:
    """The description of the panel at position ``step`` (0-based) of a prompt: its pips.

    >>> panel_description(1)
    'The same character with 2 pips below it.'
    """
    return f"The same character with {step + 1} pip{'s' if step else ''} below it."


def panel_similarity(a: PanelSpec, b: PanelSpec) -> float:
    """Ground-truth consistency of two panels in [0, 1]: the fraction of identity and
    style attributes they share. (The pip count is not compared: it depends on a panel's
    position, which a pair does not show.)"""
    return sum(getattr(a, k) == getattr(b, k) for k in ATTRIBUTES) / len(ATTRIBUTES)


@dataclass
class SyntheticWorld:
    """Seeded generator of synthetic prompts, grids and panel ground truth.

    Args:
        seed: world seed; the same seed gives the same prompts and grids.
        panel_size: side of a square panel in pixels.
        grid_drift: probability that a grid (one "seed") draws a different character
            or style (one attribute of the prompt's focus dimension redrawn).
        panel_break: probability that one panel breaks (``break_sizes`` attributes).
        break_sizes: how many attributes a broken panel changes (drawn uniformly).
        pose: vary the character's place and size in every panel (default); False keeps it
            in one place (2-pixel jitter), where consistent panels are near pixel copies.
        lighting: light every panel at its own shade of the palette (default); False
            draws every background at its light shade.
    """

    seed: int = 0
    panel_size: int = 64
    grid_drift: float = 0.1
    panel_break: float = 0.2
    break_sizes: tuple[int, ...] = (2, 3)
    pose: bool = True
    lighting: bool = True
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.panel_size < 16:
            raise ConfigError(f"panel_size must be >= 16 pixels; got {self.panel_size}.")
        for name in ("grid_drift", "panel_break"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be a probability in [0, 1]; got {value}.")
        self._rng = random.Random(self.seed)

    # ------------------------------------------------------------------ prompts
    def make_prompts(
        self, n: int, layouts: list[tuple[int, int]] | None = None, start: int = 0
    ) -> list[dict]:
        """``n`` T2IS-style prompt records (``idx``, ``prompt``, ``layout``, ``theme``,
        ``category``, ``criteria``, ``height``, ``width``, plus ``synthetic`` attributes).

        Example:
            >>> SyntheticWorld().make_prompts(1)[0]["layout"]
            '2x2'
        """
        if n < 1:
            raise InputError(f"n must be >= 1 prompts; got {n}.")
        layouts = layouts or [(2, 2)]
        records = []
        for i in range(start, start + n):
            attrs = self._prompt_attributes(i)
            focus = list(CATEGORIES)[i % len(CATEGORIES)]
            rows, cols = layouts[i % len(layouts)]
            records.append(self._prompt_record(f"syn{i:05d}", attrs, focus, rows, cols))
        return records

    def _prompt_attributes(self, i: int) -> dict:
        """Attributes of prompt ``i``: within every block of ``BLOCK`` consecutive prompts,
        each value of each attribute is used equally often (independently shuffled per
        attribute), so no value is more often "the prompt's own" than another."""
        block, offset = divmod(i, BLOCK)
        attrs = {}
        for key, values in CHOICES.items():
            order = list(values) * (BLOCK // len(values))
            random.Random(f"{self.seed}-{key}-{block}").shuffle(order)
            attrs[key] = order[offset]
        return attrs

    def _prompt_record(self, idx: str, attrs: dict, focus: str, rows: int, cols: int) -> dict:
        character, style = _character_phrase(attrs), _style_phrase(attrs)
        panels = [panel_description(k) for k in range(rows * cols)]
        return {
            "idx": idx,
            "prompt": format_grid_prompt(global_description(attrs), panels, rows, cols),
            "height": rows * self.panel_size,
            "width": cols * self.panel_size,
            "layout": f"{rows}x{cols}",
            # The theme names none of the attributes and is the same for every prompt of a
            # layout: a label must come from comparing the two images, not from checking one
            # image against the text or recalling what a named prompt's character looks like.
            "theme": f"a cartoon character in {rows * cols} images, one more pip per image",
            "category": CATEGORIES[focus],
            "task_name": f"synthetic-{focus}",
            "criteria": {
                "Identity": {"Character": f"The character stays {character}."},
                "Style": {"Drawing style": f"Every image is {style}."},
                "Logic": {"Progression": "Image k shows k pips, one more than the last."},
            },
            "source": "synthetic",
            "synthetic": {"attributes": attrs, "focus": focus},
        }

    # ------------------------------------------------------------------ grids
    def panel_specs(self, record: dict, grid_seed: int) -> list[PanelSpec]:
        """Ground truth of every panel (row-major) of grid ``grid_seed`` of a prompt."""
        from paco_reward.grids import parse_layout

        syn = record.get("synthetic")
        if not isinstance(syn, dict) or "attributes" not in syn:
            raise DataPipelineError(
                f"prompt {record.get('idx')!r} is not a synthetic prompt (no 'synthetic' key); "
                "make it with SyntheticWorld.make_prompts."
            )
        rows, cols = parse_layout(record["layout"])
        focus = syn["focus"]
        rng = random.Random(f"{self.seed}-grid-{record['idx']}-{grid_seed}")
        base = dict(syn["attributes"])
        focus_keys = {"identity": IDENTITY, "style": STYLE, "logic": IDENTITY + STYLE}[focus]
        if rng.random() < self.grid_drift:
            key = rng.choice(focus_keys)
            base[key] = _other(rng, key, base[key])
        specs = []
        for k in range(rows * cols):
            attrs = dict(base)
            step = k
            if rng.random() < self.panel_break:
                if focus == "logic" and rng.random() < 0.5:
                    step = rng.choice([s for s in range(rows * cols) if s != k] or [k])
                pool = focus_keys if rng.random() < 0.7 else IDENTITY + STYLE
                for key in rng.sample(pool, min(len(pool), rng.choice(self.break_sizes))):
                    attrs[key] = _other(rng, key, attrs[key])
            specs.append(PanelSpec(step=step, **attrs))
        return specs

    def render_panel(self, spec: PanelSpec, seed: int = 0) -> Image.Image:
        """Draw one panel (``panel_size`` square RGB image)."""
        return render_panel(
            spec, self.panel_size, seed=seed, pose=self.pose, lighting=self.lighting
        )

    def layout(self, spec: PanelSpec, seed: int = 0) -> PanelLayout:
        """Where :meth:`render_panel` puts the character and how it lights the panel."""
        return panel_layout(
            spec, self.panel_size, seed=seed, pose=self.pose, lighting=self.lighting
        )

    def describe_example(self, rng: random.Random) -> tuple[Image.Image, str]:
        """A random single panel of this world (attributes uniform, own pose and lighting)
        and its one-line description (:func:`describe_panel`): the examples of the tiny
        model's stand-in pretraining (:mod:`paco_reward.testing.standin`). They come from
        ``rng`` alone, never from a prompt's grids.

        >>> image, text = SyntheticWorld().describe_example(random.Random(0))
        >>> image.size, text.startswith("Shape ")
        ((64, 64), True)
        """
        spec = self.random_spec(rng)
        return self.render_panel(spec, seed=rng.getrandbits(32)), describe_panel(spec)

    def random_spec(self, rng: random.Random, steps: int = 4) -> PanelSpec:
        """A panel spec with every attribute drawn uniformly (and ``step`` below ``steps``):
        single panels of this world outside any prompt, e.g. for describing panels."""
        return PanelSpec(
            step=rng.randrange(steps), **{k: rng.choice(CHOICES[k]) for k in ATTRIBUTES}
        )

    def render_grid(self, record: dict, grid_seed: int) -> Image.Image:
        """The grid image of ``record`` for generator seed ``grid_seed``."""
        from paco_reward.grids import parse_layout

        rows, cols = parse_layout(record["layout"])
        s = self.panel_size
        grid = Image.new("RGB", (cols * s, rows * s))
        for k, spec in enumerate(self.panel_specs(record, grid_seed)):
            panel = self.render_panel(spec, seed=hash_seed(record["idx"], grid_seed, k))
            grid.paste(panel, ((k % cols) * s, (k // cols) * s))
        return grid

    def write_grids(
        self, records: list[dict], out_dir: str | Path, grids_per_prompt: int = 4
    ) -> Path:
        """Write ``<out_dir>/<idx>/<seed>.png`` for every prompt (the layout
        :func:`data_pipeline.generate.ingest_grids` reads) and ``<out_dir>/truth.jsonl``.
        Existing files are kept (resumable)."""
        out_dir = Path(out_dir)
        truth = []
        for record in records:
            for seed in range(grids_per_prompt):
                path = out_dir / record["idx"] / f"{seed}.png"
                if not path.is_file():
                    save_image_atomic(self.render_grid(record, seed), path)
                specs = self.panel_specs(record, seed)
                truth.append(
                    {
                        "prompt_id": record["idx"],
                        "grid": str(seed),
                        "panels": [p.as_dict() for p in specs],
                    }
                )
        write_jsonl(out_dir / "truth.jsonl", truth)
        return out_dir


def _other(rng: random.Random, key: str, value: Any) -> Any:
    return rng.choice([c for c in CHOICES[key] if c != value])


def hash_seed(*parts: Any) -> int:
    return int(stable_id(*parts, length=8), 16)


def _draw_shape(
    draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int], **kw
) -> None:
    x0, y0, x1, y1 = box
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    if shape == "circle":
        draw.ellipse(box, **kw)
    elif shape == "square":
        draw.rectangle(box, **kw)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], **kw)
    else:  # diamond
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], **kw)


@dataclass(frozen=True)
class PanelLayout:
    """Where a panel's pieces are: the character's bounding ``box`` (x0, y0, x1, y1), the
    scene's ``shade`` and the resulting ``background``, texture ``ink`` and ``line``
    (outline and pips) colours, the ``hatch_phase`` of a hatched texture, and the pips'
    ``pip_boxes``. Nuisance, not ground truth: it varies between consistent panels."""

    box: tuple[int, int, int, int]
    shade: str
    background: tuple[int, int, int]
    ink: tuple[int, int, int]
    line: tuple[int, int, int]
    hatch_phase: int
    pip_boxes: tuple[tuple[int, int, int, int], ...]


# Side of the character's box as a fraction of the panel side, with pose.
POSE_SIZES = (0.42, 0.72)


def panel_layout(
    spec: PanelSpec, size: int = 64, seed: int = 0, pose: bool = True, lighting: bool = True
) -> PanelLayout:
    """The placement and lighting :func:`render_panel` uses for ``spec`` and ``seed``.

    With ``pose`` the character's box is a square of a random side (``POSE_SIZES`` of the
    panel) anywhere above the pips; without it, a fixed box moved by at most 2 pixels.
    With ``lighting`` the shade is drawn per panel; without it, it is ``"light"``.

    >>> panel_layout(PanelSpec("circle", "red", "dots", "warm", "grain", 3, 1)).shade in SHADES
    True
    """
    rng = random.Random(seed)
    shade = rng.choice(SHADES) if lighting else "light"
    hatch_phase = rng.randrange(8)
    pip = max(2, size // 20)
    pip_y = size - pip * 2 - 1
    if pose:
        low, high = POSE_SIZES
        side = int(round(rng.uniform(low, high) * size))
        x0 = rng.randint(1, size - side - 1)
        y0 = rng.randint(1, max(1, pip_y - side - 2))
        box = (x0, y0, x0 + side, y0 + side)
    else:
        margin = size // 5
        jitter = rng.randint(-2, 2)
        box = (
            margin + jitter,
            margin // 2 + jitter,
            size - margin + jitter,
            size - margin - margin // 4,
        )
    count = spec.step + 1
    x = (size - count * pip * 2) // 2
    pips = tuple((x + k * 2 * pip, pip_y, x + k * 2 * pip + pip, pip_y + pip) for k in range(count))
    return PanelLayout(
        box=box,
        shade=shade,
        background=PALETTES[spec.palette][shade],
        ink=INK[shade],
        line=LINE[shade],
        hatch_phase=hatch_phase,
        pip_boxes=pips,
    )


def render_panel(
    spec: PanelSpec, size: int = 64, seed: int = 0, pose: bool = True, lighting: bool = True
) -> Image.Image:
    """Draw a panel: a background of the palette at the panel's shade with its texture, the
    character (shape filled with its colour, outline, marking) where :func:`panel_layout`
    puts it, and ``spec.step + 1`` pips along the bottom edge. ``seed`` fixes the
    panel's nuisance (place, size, shade, grain); the same spec and seed draw the same
    pixels.

    >>> render_panel(PanelSpec("circle", "red", "dots", "warm", "grain", 3, 1)).size
    (64, 64)
    """
    layout = panel_layout(spec, size, seed=seed, pose=pose, lighting=lighting)
    rng = random.Random(f"{seed}-texture")
    image = Image.new("RGB", (size, size), layout.background)
    draw = ImageDraw.Draw(image)
    # Textures are drawn coarse enough (2-pixel grains and lines) to survive the resize to
    # a tiny model's 56-pixel input; the hatch's phase varies so that two hatched panels
    # are not pixel copies either.
    if spec.texture == "grain":
        for _ in range(size * size // 40):
            x, y = rng.randrange(size), rng.randrange(size)
            draw.rectangle((x, y, x + 1, y + 1), fill=layout.ink)
    elif spec.texture == "hatch":
        for offset in range(-size + layout.hatch_phase, size, 8):
            draw.line([(offset, size), (offset + size, 0)], fill=layout.ink, width=2)
    box = layout.box
    _draw_shape(
        draw,
        spec.shape,
        box,
        fill=COLOURS[spec.colour],
        outline=layout.line if spec.outline else None,
        width=spec.outline or 1,
    )
    side = box[2] - box[0]
    cx, cy = (box[0] + box[2]) // 2, (box[1] + box[3]) // 2
    if spec.shape == "triangle":  # the marking sits in the wide part of the triangle
        cy = box[1] + 2 * (box[3] - box[1]) // 3
    r = max(2, side // 8)
    mark = (255, 255, 255) if spec.colour != "yellow" else (30, 30, 30)
    if spec.marking == "dots":
        for dx in (-r * 2, r * 2):
            draw.ellipse((cx + dx - r, cy - r, cx + dx + r, cy + r), fill=mark)
    elif spec.marking == "stripes":
        for dy in (-r * 2, 0, r * 2):
            draw.line(
                [(cx - 3 * r, cy + dy), (cx + 3 * r, cy + dy)], fill=mark, width=max(2, r // 2)
            )
    elif spec.marking == "cross":
        draw.line([(cx - 2 * r, cy - 2 * r), (cx + 2 * r, cy + 2 * r)], fill=mark, width=max(2, r))
        draw.line([(cx - 2 * r, cy + 2 * r), (cx + 2 * r, cy - 2 * r)], fill=mark, width=max(2, r))
    for pip_box in layout.pip_boxes:
        draw.rectangle(pip_box, fill=layout.line)
    return image


@dataclass
class SimulatedAnnotators:
    """SYNTHETIC annotators: each ranks an instance's candidates by ground-truth
    similarity to the reference (:func:`panel_similarity`) plus Gaussian noise.

    Candidates that look alike to the reference (equal similarity) share one noisy score,
    so they are always tied, as a person cannot order two equally faithful panels; others
    are tied when their noisy scores are closer than ``tie_margin``. Annotators judge only
    what a pair shows: the pip count depends on a panel's position, which a pair does not
    show, so it plays no part.

    An annotator also says when even the best candidate does not match the reference
    (``none_consistent``, a broken reference): when its noisy score of the best candidate is
    below ``none_consistent_below``. Without that flag, the best candidate of a broken
    reference became a consistent pair though it differed in two or more attributes (12 % of
    such train pairs of the demo's export were labelled Yes).

    Args:
        n: number of annotators.
        noise: standard deviation of the per-candidate noise (similarity is in [0, 1]).
        tie_margin: candidates whose noisy scores differ by less than this are tied.
        seed: seed of the noise.
        none_consistent_below: flag an instance whose best candidate scores below this
            (between one and two differing attributes of six); ``None`` never flags.
    """

    n: int = 3
    noise: float = 0.08
    tie_margin: float = 0.02
    seed: int = 0
    none_consistent_below: float | None = 0.75

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"n must be >= 1 annotators; got {self.n}.")
        if self.none_consistent_below is not None and not 0 < self.none_consistent_below <= 1:
            raise ConfigError(
                "none_consistent_below must be in (0, 1] (a similarity) or None; got "
                f"{self.none_consistent_below!r}."
            )
        if self.noise < 0 or self.tie_margin < 0:
            raise ConfigError(
                f"noise and tie_margin must be >= 0; got noise={self.noise}, "
                f"tie_margin={self.tie_margin}."
            )

    def true_scores(
        self, instance: dict, world: SyntheticWorld, prompts: dict[str, dict]
    ) -> list[float]:
        """Ground-truth similarity of each candidate to the reference."""
        record = prompts[instance["prompt_id"]]
        ref = instance["reference"]
        ref_spec = world.panel_specs(record, int(ref["grid"]))[ref["pos"]]
        return [
            panel_similarity(ref_spec, world.panel_specs(record, int(c["grid"]))[c["pos"]])
            for c in instance["candidates"]
        ]

    def annotate(
        self, instances: list[dict], world: SyntheticWorld, prompts: dict[str, dict]
    ) -> list[dict]:
        """Ranking records (``instance_id``, ``annotator``, ``ranking`` with ties as
        nested lists, best first) in the format :func:`data_pipeline.rankings.load_rankings` reads."""
        records = []
        for instance in instances:
            truth = self.true_scores(instance, world, prompts)
            for a in range(self.n):
                rng = random.Random(hash_seed(self.seed, a, instance["instance_id"]))
                perceived = {t: t + rng.gauss(0.0, self.noise) for t in sorted(set(truth))}
                noisy = [perceived[t] for t in truth]
                order = sorted(range(len(noisy)), key=lambda i: -noisy[i])
                groups: list[list[int]] = []
                for i in order:
                    if groups and math.isclose(
                        noisy[groups[-1][-1]], noisy[i], abs_tol=self.tie_margin
                    ):
                        groups[-1].append(i)
                    else:
                        groups.append([i])
                ranking = [g[0] if len(g) == 1 else g for g in groups]
                record = {
                    "instance_id": instance["instance_id"],
                    "annotator": f"sim{a}",
                    "ranking": ranking,
                }
                if (
                    self.none_consistent_below is not None
                    and max(noisy) < self.none_consistent_below
                ):
                    record["none_consistent"] = True
                records.append(record)
        return records


def attribute_describer(world: SyntheticWorld, prompts: dict[str, dict]):
    """For :class:`data_pipeline.reasons.TemplateReasoner`: ``pair -> (attrs_a, attrs_b)``
    from the synthetic ground truth of the pair's two panels (``panel_a``/``panel_b`` =
    ``"grid:pos"``); ``None`` for a pair that is not synthetic.

    Only identity and style attributes are described: the pip count depends on a panel's
    position in its grid, which a pair does not show."""

    def describe(pair: dict) -> tuple[dict, dict] | None:
        record = prompts.get(pair.get("prompt_id", ""))
        if record is None or "synthetic" not in record or not pair.get("panel_a"):
            return None
        out = []
        for key in ("panel_a", "panel_b"):
            grid, pos = pair[key].split(":")
            out.append(panel_attributes(world.panel_specs(record, int(grid))[int(pos)]))
        return out[0], out[1]

    return describe


def pair_truth(pair: dict, world: SyntheticWorld, prompts: dict[str, dict]) -> float | None:
    """Ground-truth similarity (:func:`panel_similarity`) of a synthetic pair's two panels;
    ``None`` for a pair that is not synthetic."""
    record = prompts.get(pair.get("prompt_id", ""))
    if record is None or "synthetic" not in record or not pair.get("panel_a"):
        return None
    specs = []
    for key in ("panel_a", "panel_b"):
        grid, pos = pair[key].split(":")
        specs.append(world.panel_specs(record, int(grid))[int(pos)])
    return panel_similarity(*specs)
