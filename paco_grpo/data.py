"""Prompt data for PaCo-GRPO: T2IS JSONL, plain text, and (prompt, image) parquet.

A T2IS line holds ``idx``, the grid ``prompt`` (layout + global description + one
description per panel), ``layout``, ``height``/``width``, ``theme`` and ``criteria``.
Each becomes a :class:`PromptItem` whose ``id`` groups its samples.

A parquet file (editing data) has a ``prompt`` column, an ``image`` column (encoded
bytes, a ``{"bytes", "path"}`` struct as ``datasets`` writes it, or a path) and
optionally ``id``/``idx``, ``height``, ``width``; the source image lands in
``metadata["source_image"]`` for editing rewards.

    >>> items = load_prompts("recipes/data/t2is_train_metadata.jsonl")   # doctest: +SKIP
    >>> items[0].metadata["layout"]                                      # doctest: +SKIP
    '2x2'
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from paco_reward.errors import PromptError
from paco_reward.grids import split_panel_prompts
from paco_reward.images import image_hash

logger = logging.getLogger(__name__)

__all__ = ["PromptItem", "load_prompts"]


@dataclass(frozen=True)
class PromptItem:
    """One prompt: ``id`` (group key), text, optional size, and metadata for the rewards."""

    id: str
    prompt: str
    height: int | None = None
    width: int | None = None
    metadata: dict = field(default_factory=dict)


def _t2is(path: Path) -> list[PromptItem]:
    items = []
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
        global_text, panels = split_panel_prompts(row["prompt"])
        metadata = {
            "layout": row.get("layout"),
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
    return items


def _text(path: Path) -> list[PromptItem]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [PromptItem(id=str(k), prompt=t.strip()) for k, t in enumerate(lines) if t.strip()]


def _parquet(path: Path) -> list[PromptItem]:
    import pyarrow.parquet as pq

    from paco_reward.errors import InvalidImageError
    from paco_reward.images import load_image

    rows = pq.read_table(path).to_pylist()
    items = []
    for k, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise PromptError(f"{path}: row {k} needs a non-empty 'prompt' string.")
        image = row.get("image")
        if isinstance(image, dict):
            image = image.get("bytes") or image.get("path")
        if image is None:
            raise PromptError(f"{path}: row {k} has no 'image'; editing data needs a source image.")
        try:
            source = load_image(image, f"{path.name}[{k}].image")
        except InvalidImageError as err:
            raise PromptError(str(err)) from None
        items.append(
            PromptItem(
                id=str(row.get("id", row.get("idx", k))),
                prompt=row["prompt"],
                height=row.get("height"),
                width=row.get("width"),
                metadata={"source_image": source},
            )
        )
    return items


def load_prompts(path: str | Path, format: str = "auto") -> list[PromptItem]:
    """Read prompts from a T2IS JSONL (``format="t2is"``), a text file (``"text"``) or a
    (prompt, image) parquet file (``"parquet"``).

    ``"auto"`` picks T2IS for ``.jsonl``/``.json``, parquet for ``.parquet`` and text otherwise.

    Raises:
        PromptError: missing file, empty file, malformed line or duplicate ids.
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
    items = loaders[format](path)
    if not items:
        raise PromptError(f"{path}: no prompts found.")
    # ids define GRPO groups; editing data may apply one instruction id to several images
    # (groups are then (id, image hash)), so only repeated (id, image) pairs are duplicates.
    ids = [
        (item.id, image_hash(item.metadata["source_image"]))
        if "source_image" in item.metadata
        else item.id
        for item in items
    ]
    if len(set(ids)) != len(ids):
        dupes = sorted({str(i) for i in ids if ids.count(i) > 1})[:5]
        raise PromptError(f"{path}: duplicate prompt ids {dupes}; ids define GRPO groups.")
    return items
