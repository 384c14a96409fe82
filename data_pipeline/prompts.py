"""Stage 1: prompts and layouts.

Reads T2IS-style JSONL (``prompt``, ``layout``, ``theme``, ``criteria``, ``height``,
``width``, ``category`` ...), resolves each record's layout and per-panel
descriptions, and writes the normalised records to ``<work_dir>/prompts.jsonl``.

    >>> from data_pipeline.prompts import normalize_prompt
    >>> rec = normalize_prompt({"idx": "7", "prompt": "A cat. [LEFT]:sits. [RIGHT]:runs.",
    ...                         "layout": "1x2"}, line=1)
    >>> rec["prompt_id"], rec["rows"], rec["cols"], rec["panels"]
    ('7', 1, 2, ['sits.', 'runs.'])
"""

from __future__ import annotations

import logging
from pathlib import Path

from data_pipeline.storage import DataPipelineError, read_jsonl, write_jsonl
from paco_reward.errors import LayoutError, PromptError
from paco_reward.grids import parse_layout, split_panel_prompts

logger = logging.getLogger(__name__)

PROMPTS_FILE = "prompts.jsonl"


def normalize_prompt(record: dict, line: int, source: str = "t2is") -> dict:
    """One T2IS record -> the pipeline's prompt record.

    Adds ``prompt_id`` (``idx``, else ``id``, else the line number), ``rows``/``cols``
    (from ``layout``, else parsed from the prompt), ``global`` and ``panels`` (the
    per-panel descriptions, empty if the prompt has no panel markers), ``theme``
    (falls back to the global description) and ``category``/``source``.

    Raises:
        PromptError: no usable ``prompt``, or panel descriptions that do not match the layout.
        LayoutError: no layout in the record nor the prompt.
    """
    prompt = record.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise PromptError(f"line {line}: record has no non-empty 'prompt' string: {record!r:.120}.")
    prompt_id = str(record.get("idx", record.get("id", line)))
    try:
        rows, cols = parse_layout(record.get("layout") or prompt)
    except LayoutError as err:
        raise LayoutError(f"line {line} (prompt {prompt_id!r}): {err}") from None
    global_description, panels = split_panel_prompts(prompt)
    if panels and len(panels) != rows * cols:
        raise PromptError(
            f"line {line} (prompt {prompt_id!r}): layout {rows}x{cols} needs {rows * cols} "
            f"panel descriptions but the prompt has {len(panels)}; fix 'layout' or the markers."
        )
    out = dict(record)
    out.update(
        prompt_id=prompt_id,
        rows=rows,
        cols=cols,
        layout=f"{rows}x{cols}",
        global_description=global_description,
        panels=panels,
        theme=(record.get("theme") or global_description or prompt).strip(),
        category=record.get("category") or "uncategorised",
        source=record.get("source") or source,
    )
    return out


def load_prompts(path: str | Path, source: str = "t2is") -> list[dict]:
    """Read and normalise a T2IS-style prompt JSONL file (see :func:`normalize_prompt`).

    Raises:
        DataPipelineError: missing file, bad JSON, or a duplicated prompt id.

    Example:
        >>> recs = load_prompts("tests/data/t2is_train_metadata.jsonl")   # doctest: +SKIP
    """
    records = [normalize_prompt(r, i, source) for i, r in enumerate(read_jsonl(path), start=1)]
    seen: set[str] = set()
    for r in records:
        if r["prompt_id"] in seen:
            raise DataPipelineError(
                f"{path}: prompt id {r['prompt_id']!r} appears twice; ids must be unique."
            )
        seen.add(r["prompt_id"])
    return records


def prepare_prompts(
    source_path: str | Path, work_dir: str | Path, *, limit: int | None = None, source: str = "t2is"
) -> Path:
    """Stage 1: normalise ``source_path`` into ``<work_dir>/prompts.jsonl`` (atomic;
    re-running rewrites the same content).

    Returns:
        The path of the written file.
    """
    records = load_prompts(source_path, source=source)
    if limit is not None:
        records = records[:limit]
    out = Path(work_dir) / PROMPTS_FILE
    write_jsonl(out, records)
    logger.info("prompts: %d records -> %s", len(records), out)
    return out


def read_prompts(work_dir: str | Path) -> dict[str, dict]:
    """The normalised prompts of a work folder, by ``prompt_id``."""
    return {r["prompt_id"]: r for r in read_jsonl(Path(work_dir) / PROMPTS_FILE)}
