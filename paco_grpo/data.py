"""Prompt data for PaCo-GRPO: T2IS JSONL and plain text files.

A T2IS line holds ``idx``, the grid ``prompt`` (layout + global description + one
description per panel), ``layout``, ``height``/``width``, ``theme`` and ``criteria``.
Each becomes a :class:`PromptItem` whose ``id`` groups its samples.

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
    # imported here: data_pipeline.grids and paco_reward import each other at module level
    from data_pipeline.grids import split_panel_prompts

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


def load_prompts(path: str | Path, format: str = "auto") -> list[PromptItem]:
    """Read prompts from a T2IS JSONL (``format="t2is"``) or text file (``"text"``).

    ``"auto"`` picks T2IS for ``.jsonl``/``.json`` and text otherwise.

    Raises:
        PromptError: missing file, empty file, malformed line or duplicate ids.
    """
    path = Path(path)
    if not path.is_file():
        raise PromptError(f"No prompt file at {str(path)!r}.")
    if format == "auto":
        format = "t2is" if path.suffix in (".jsonl", ".json") else "text"
    if format not in ("t2is", "text"):
        raise PromptError(f"prompt format must be 'auto', 't2is' or 'text'; got {format!r}.")
    items = _t2is(path) if format == "t2is" else _text(path)
    if not items:
        raise PromptError(f"{path}: no prompts found.")
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise PromptError(f"{path}: duplicate prompt ids {dupes}; ids define GRPO groups.")
    return items
