"""Prompt data for PaCo-GRPO: T2IS JSONL, plain text, and (prompt, image) parquet.

A T2IS line holds ``idx``, the grid ``prompt`` (layout + global description + one
description per panel), ``layout``, ``height``/``width``, ``theme`` and ``criteria``.
Each becomes a :class:`PromptItem` whose ``id`` groups its samples.

Every T2IS or text prompt gets its grid layout when the file is read, in this order: the
line's ``layout`` field, the layout the prompt itself names ("... with a 1x4 grid
layout"), then the ``layout`` the caller (the recipe) gives. A prompt with none of these is
a :class:`~paco_reward.errors.LayoutError` naming the line: no reward ever guesses one.

A prompt with panel markers (``[TOP]-[LEFT]:``, ``PANEL-1:``, ... see
:mod:`paco_reward.grids`) must have exactly one per panel of its layout, else it is a
:class:`~paco_reward.errors.PromptError` naming ``file:line``. A prompt without markers
is a whole-set prompt, a deliberate fallback for plain prompts: its theme is the whole
prompt, its ``panel_prompts`` is empty, and CLIP-T compares the whole grid with it. Plain
text files are such prompts by design; in a T2IS file, whose lines should describe each
panel, the loader warns once, naming the lines.

A parquet file (editing data) has a ``prompt`` column, an ``image`` column (encoded
bytes, a ``{"bytes", "path"}`` struct as ``datasets`` writes it, or a path) and
optionally ``id``/``idx``, ``height``, ``width``; the source image lands in
``metadata["source_image"]`` for editing rewards, and every other non-null column (e.g.
``panel_prompts``, ``layout``) in ``metadata`` under its own name. An ``image`` cell may
also hold a list of images (a multi-reference edit, as Qwen-Image-Edit-Plus takes: "the
person of picture 1 in the room of picture 2"): they land in ``metadata["source_images"]``
in order, and the first, the image being edited, in ``metadata["source_image"]`` too
(:func:`edit_references` reads either).

    >>> items = load_prompts("recipes/data/t2is_train_metadata.jsonl")   # doctest: +SKIP
    >>> items[0].metadata["layout"]                                      # doctest: +SKIP
    '2x2'
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from paco_reward.errors import LayoutError, PromptError
from paco_reward.grids import find_panel_markers, parse_layout, split_panel_prompts
from paco_reward.images import image_hash

logger = logging.getLogger(__name__)

__all__ = ["PromptItem", "edit_references", "load_prompts", "references_hash"]


@dataclass(frozen=True)
class PromptItem:
    """One prompt: ``id`` (group key), text, optional size, and metadata for the rewards."""

    id: str
    prompt: str
    height: int | None = None
    width: int | None = None
    metadata: dict = field(default_factory=dict)


def resolve_layout(where: str, prompt: str, line_layout: str | None, fallback: str | None) -> str:
    """The ``"RxC"`` layout of one prompt: the line's field, else the prompt's own, else
    ``fallback``; raises :class:`LayoutError` naming ``where`` when there is none."""
    for candidate in (line_layout, prompt):
        if candidate:
            try:
                rows, cols = parse_layout(candidate)
                return f"{rows}x{cols}"
            except LayoutError:
                if candidate is line_layout:
                    raise LayoutError(f"{where}: invalid layout {line_layout!r}.") from None
    if fallback:
        rows, cols = parse_layout(fallback)
        return f"{rows}x{cols}"
    raise LayoutError(
        f"{where}: no grid layout: the line has no 'layout' field and the prompt names none "
        f"({prompt[:80]!r}); add one (e.g. '2x2') or set the recipe's `layout`."
    )


def split_prompt_panels(where: str, prompt: str, layout: str) -> tuple[str, list[str]]:
    """(global description, panel descriptions) of one grid prompt, checked against its
    ``"RxC"`` layout: the panel markers, if any, must number ``rows * cols``.

    Raises:
        PromptError: naming ``where`` (``file:line``), the layout and the markers found,
            when the prompt has markers but not one per panel.

    Example:
        >>> split_prompt_panels("p.jsonl:1", "Foxes. PANEL-1:a. PANEL-2:b.", "1x2")
        ('Foxes.', ['a.', 'b.'])
    """
    global_text, panels = split_panel_prompts(prompt)
    rows, cols = parse_layout(layout)
    if panels and len(panels) != rows * cols:
        raise PromptError(
            f"{where}: layout {rows}x{cols} needs {rows * cols} panel descriptions but the "
            f"prompt has {len(panels)} (markers: {find_panel_markers(prompt)}); fix the layout "
            "(the line's 'layout', the prompt's 'RxC' or the recipe's `layout`) or mark each "
            "panel once, e.g. '[TOP]-[LEFT]:' or 'PANEL-1:'."
        )
    return global_text, panels


def _t2is(path: Path, layout: str | None) -> list[PromptItem]:
    items, unmarked = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise PromptError(f"{path}:{lineno}: not valid JSON ({err}).") from None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("prompt"), str)
            or not row["prompt"].strip()
        ):
            raise PromptError(f"{path}:{lineno}: a T2IS line needs a non-empty 'prompt' string.")
        where = f"{path}:{lineno}"
        grid_layout = resolve_layout(where, row["prompt"], row.get("layout"), layout)
        global_text, panels = split_prompt_panels(where, row["prompt"], grid_layout)
        if not panels and grid_layout != "1x1":
            unmarked.append(lineno)
        metadata = {
            "layout": grid_layout,
            "theme": row.get("theme"),
            "criteria": row.get("criteria"),
            "category": row.get("category"),
            "global_description": global_text,
            "panel_prompts": panels,
        }
        items.append(
            PromptItem(
                id=str(row.get("idx", lineno)),
                prompt=row["prompt"],
                height=row.get("height"),
                width=row.get("width"),
                metadata={k: v for k, v in metadata.items() if v is not None},
            )
        )
    if unmarked:
        # Not an error: a JSONL of plain prompts is a fair input. But a T2IS line is meant to
        # describe each panel, so say which lines were read as whole-set prompts.
        lines = ", ".join(map(str, unmarked[:10])) + (", ..." if len(unmarked) > 10 else "")
        logger.warning(
            "%s: %d of %d prompts have no panel markers for a multi-panel layout (lines %s); "
            "each is read as a whole-set prompt: its theme is the whole prompt and CLIP-T "
            "compares the whole grid with it. Mark each panel ('[TOP]-[LEFT]:', 'PANEL-1:') to "
            "give panels their own text; plain prompts in a .txt file load without this warning.",
            path, len(unmarked), len(items), lines,
        )  # fmt: skip
    return items


def _text(path: Path, layout: str | None) -> list[PromptItem]:
    items = []
    for k, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        where = f"{path}:{k + 1}"
        grid_layout = resolve_layout(where, line, None, layout)
        split_prompt_panels(where, line, grid_layout)  # a marked prompt must fit its layout
        items.append(PromptItem(id=str(k), prompt=line.strip(), metadata={"layout": grid_layout}))
    return items


# Parquet columns a PromptItem reads itself; any other column is metadata.
PARQUET_FIELDS = ("id", "idx", "prompt", "image", "height", "width")


def _parquet(path: Path, layout: str | None) -> list[PromptItem]:
    import pyarrow.parquet as pq

    from paco_reward.errors import InvalidImageError
    from paco_reward.images import load_image

    rows = pq.read_table(path).to_pylist()
    items = []
    for k, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise PromptError(f"{path}: row {k} needs a non-empty 'prompt' string.")
        cell = row.get("image")
        cells = cell if isinstance(cell, list) else [cell]
        images = [c.get("bytes") or c.get("path") if isinstance(c, dict) else c for c in cells]
        if not images or any(image is None for image in images):
            raise PromptError(f"{path}: row {k} has no 'image'; editing data needs a source image.")
        try:
            sources = [
                load_image(image, f"{path.name}[{k}].image" + (f"[{j}]" if len(cells) > 1 else ""))
                for j, image in enumerate(images)
            ]
        except InvalidImageError as err:
            raise PromptError(str(err)) from None
        extra = {
            key: value
            for key, value in row.items()
            if key not in PARQUET_FIELDS and value is not None
        }
        references = {"source_images": sources} if isinstance(cell, list) else {}
        items.append(
            PromptItem(
                id=str(row.get("id", row.get("idx", k))),
                prompt=row["prompt"],
                height=row.get("height"),
                width=row.get("width"),
                metadata={**extra, "source_image": sources[0], **references},
            )
        )
    return items


def edit_references(item: PromptItem | dict) -> list:
    """An editing item's (or its metadata's) reference images, the image being edited first:
    ``metadata["source_images"]`` of a multi-reference edit, else ``[metadata["source_image"]]``.

    Raises:
        PromptError: naming the item, when it has neither.

    Example:
        >>> edit_references({"source_image": "cat.png"})
        ['cat.png']
    """
    metadata = item.metadata if isinstance(item, PromptItem) else item
    references = metadata.get("source_images") or [metadata.get("source_image")]
    if any(reference is None for reference in references):
        owner = f"prompt item {item.id!r}" if isinstance(item, PromptItem) else "an item"
        raise PromptError(
            f"{owner} has no metadata['source_image']; editing pipelines and rewards need "
            "(prompt, image) parquet prompt data."
        )
    return list(references)


def references_hash(images) -> str:
    """The content hash of an edit's references (:func:`paco_reward.images.image_hash` of the
    one image, or of their hashes in order): with the prompt id, an edit's GRPO group."""
    hashes = [image_hash(image) for image in images]
    if len(hashes) == 1:
        return hashes[0]
    import hashlib

    return hashlib.sha256(" ".join(hashes).encode()).hexdigest()


def load_prompts(
    path: str | Path, format: str = "auto", layout: str | None = None
) -> list[PromptItem]:
    """Read prompts from a T2IS JSONL (``format="t2is"``), a text file (``"text"``) or a
    (prompt, image) parquet file (``"parquet"``).

    ``"auto"`` picks T2IS for ``.jsonl``/``.json``, parquet for ``.parquet`` and text otherwise.
    T2IS and text prompts get ``metadata["layout"]`` (see the module docstring for the
    order); ``layout`` is the last resort.

    Raises:
        PromptError: missing file, empty file, malformed line, duplicate ids, or a T2IS or
            text prompt whose panel markers do not number its layout's panels (naming
            ``file:line``).
        LayoutError: a grid prompt whose layout cannot be found, naming its line.
    """
    path = Path(path)
    if not path.is_file():
        raise PromptError(f"No prompt file at {str(path)!r}.")
    if format == "auto":
        format = {".jsonl": "t2is", ".json": "t2is", ".parquet": "parquet"}.get(path.suffix, "text")
    loaders = {"t2is": _t2is, "text": _text, "parquet": _parquet}
    if format not in loaders:
        raise PromptError(
            f"prompt format must be 'auto', 't2is', 'text' or 'parquet'; got {format!r}."
        )
    items = loaders[format](path, layout)
    if not items:
        raise PromptError(f"{path}: no prompts found.")
    # ids define GRPO groups; editing data may apply one instruction id to several images
    # (groups are then (id, image hash)), so only repeated (id, image) pairs are duplicates.
    ids = [
        (item.id, references_hash(edit_references(item)))
        if "source_image" in item.metadata
        else item.id
        for item in items
    ]
    if len(set(ids)) != len(ids):
        dupes = sorted({str(i) for i in ids if ids.count(i) > 1})[:5]
        raise PromptError(f"{path}: duplicate prompt ids {dupes}; ids define GRPO groups.")
    return items
