"""GEdit-Bench rows, the official results layout, and the held-out preset.

Data: the hub dataset ``stepfun-ai/GEdit-Bench``, split ``train`` (columns ``task_type``,
``key``, ``instruction``, ``instruction_language`` in {``en``, ``cn``}, ``input_image``,
``Intersection_exist``), or a local copy of it: a parquet file / folder of parquet files with
those columns (images as the hub stores them), or a folder with ``rows.jsonl`` whose
``input_image`` is a path relative to the folder (the test fixtures).

Layout of a model's results (Step1X-Edit ``EVAL.md``)::

    <root>/<model>/fullset/<task_type>/<lang>/<key>.png         the edit
    <root>/<model>/fullset/<task_type>/<lang>/<key>_SRCIMG.png  the source, as given

Held-out preset: PaCo-RL's GRPO editing prompts (``PaCo-GRPO/dataset/GEdit-Bench/
preprocess.py``, ``train_split``) are every row except 128 drawn with ``random.seed(42);
random.sample(range(N), 128)`` over the split in its hub row order, both languages together;
``subset="paco_heldout"`` keeps those 128, the only rows its editors were not trained on.

    >>> normalize_language("zh"), normalize_language("EN")
    ('cn', 'en')
    >>> len(paco_heldout_indices(1212)), paco_heldout_indices(1212) == paco_heldout_indices(1212)
    (128, True)
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from paco_reward.errors import InputError, InvalidImageError, PathNotFoundError

__all__ = [
    "GROUPS",
    "LANGUAGES",
    "SUBSETS",
    "GEditRow",
    "edit_path",
    "load_rows",
    "normalize_language",
    "open_image",
    "paco_heldout_indices",
    "select_rows",
    "source_path",
]

#: The 11 task groups, in ``calculate_statistics.py``'s order.
GROUPS = (
    "background_change",
    "color_alter",
    "material_alter",
    "motion_change",
    "ps_human",
    "style_change",
    "subject-add",
    "subject-remove",
    "subject-replace",
    "text_change",
    "tone_transfer",
)
LANGUAGES = ("en", "cn")
#: ``zh`` is what ``calculate_statistics.py --language`` offers; the data says ``cn``.
LANGUAGE_ALIASES = {"en": "en", "cn": "cn", "zh": "cn"}
SUBSETS = ("fullset", "paco_heldout")
HUB_ID = "stepfun-ai/GEdit-Bench"
PACO_HELDOUT_SIZE = 128
PACO_HELDOUT_SEED = 42


def normalize_language(language: str) -> str:
    """``en`` or ``cn`` (``zh`` is an alias of ``cn``; case ignored).

    Raises:
        InputError: any other language.
    """
    lang = str(language).strip().lower()
    if lang not in LANGUAGE_ALIASES:
        raise InputError(
            f"Unknown GEdit-Bench language {language!r}: use 'en' or 'cn' ('zh' is accepted "
            "for 'cn')."
        )
    return LANGUAGE_ALIASES[lang]


def check_group(task_type: str) -> str:
    """``task_type`` itself when it is one of :data:`GROUPS`.

    Raises:
        InputError: an unknown group.
    """
    if task_type not in GROUPS:
        raise InputError(
            f"Unknown GEdit-Bench task_type {task_type!r}; the groups are {list(GROUPS)}."
        )
    return task_type


def paco_heldout_indices(n_rows: int) -> list[int]:
    """Row indices PaCo-RL held out of GRPO training: ``random.seed(42);
    random.sample(range(n_rows), 128)`` (a fresh ``random.Random(42)`` draws the same)."""
    if n_rows < PACO_HELDOUT_SIZE:
        raise InputError(
            f"The paco_heldout preset draws {PACO_HELDOUT_SIZE} of the full split's rows; got "
            f"{n_rows} rows. Load the whole split (no language or group filter) first."
        )
    return random.Random(PACO_HELDOUT_SEED).sample(range(n_rows), PACO_HELDOUT_SIZE)


@dataclass(frozen=True)
class GEditRow:
    """One GEdit-Bench row. ``index`` is its position in the hub split (the held-out preset
    draws on it); ``source`` is a PIL image or a path."""

    index: int
    task_type: str
    key: str
    instruction: str
    language: str
    intersection: bool
    source: Any

    @property
    def item_id(self) -> str:
        """The row's unique id: ``<lang>/<key>`` (a key appears once per language)."""
        return f"{self.language}/{self.key}"


def _rows_from_records(records: Iterable[dict], base: Path | None) -> list[GEditRow]:
    rows = []
    for index, rec in enumerate(records):
        missing = [
            c
            for c in ("task_type", "key", "instruction", "instruction_language", "input_image")
            if c not in rec
        ]
        if missing:
            raise InputError(f"GEdit-Bench row {index} lacks the column(s) {missing}.")
        source = rec["input_image"]
        if isinstance(source, str) and base is not None:
            source = base / source
        elif isinstance(source, dict) and source.get("bytes") is not None:  # raw parquet
            import io

            source = Image.open(io.BytesIO(source["bytes"]))
        rows.append(
            GEditRow(
                index=index,
                task_type=check_group(rec["task_type"]),
                key=str(rec["key"]),
                instruction=str(rec["instruction"]),
                language=normalize_language(rec["instruction_language"]),
                intersection=bool(rec.get("Intersection_exist", False)),
                source=source,
            )
        )
    return rows


def load_rows(data: str | Path | None = None) -> list[GEditRow]:
    """Every row of the split, in hub row order.

    Args:
        data: ``None`` or the hub id for ``stepfun-ai/GEdit-Bench`` (``datasets``, cached);
            a folder with ``rows.jsonl``; a parquet file or a folder of them.

    Raises:
        PathNotFoundError: a local path that does not exist.
        InputError: a row lacks a column, or has an unknown group or language.
    """
    if data is None or str(data) == HUB_ID:
        from datasets import load_dataset

        ds = load_dataset(HUB_ID, split="train")  # the split, not the DatasetDict (pitfall 1)
        return _rows_from_records(ds, None)
    path = Path(data)
    if not path.exists():
        raise PathNotFoundError(
            f"GEdit-Bench data {str(path)!r} does not exist; give the hub id {HUB_ID!r}, a "
            "parquet file or folder, or a folder with rows.jsonl."
        )
    if path.is_dir() and (path / "rows.jsonl").is_file():
        lines = (path / "rows.jsonl").read_text(encoding="utf-8").splitlines()
        return _rows_from_records([json.loads(line) for line in lines if line.strip()], path)
    files = sorted(path.glob("**/*.parquet")) if path.is_dir() else [path]
    if not files:
        raise PathNotFoundError(f"No rows.jsonl and no parquet file under {str(path)!r}.")
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    return _rows_from_records(ds, None)


def select_rows(
    rows: Sequence[GEditRow],
    *,
    subset: str = "fullset",
    languages: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[GEditRow]:
    """The rows of a subset, languages and groups (in row order).

    Args:
        subset: ``fullset`` or ``paco_heldout`` (drawn on the full split, so ``rows`` must
            be all of it).
        languages: ``en``/``cn``/``zh``; ``None`` keeps both.
        groups: task types; ``None`` keeps all 11.
        limit: keep the first ``limit`` (a smoke run).

    Raises:
        InputError: an unknown subset, language or group.
    """
    if subset not in SUBSETS:
        raise InputError(f"Unknown GEdit-Bench subset {subset!r}; choose one of {list(SUBSETS)}.")
    keep = list(rows)
    if subset == "paco_heldout":
        held = set(paco_heldout_indices(len(rows)))
        keep = [r for r in keep if r.index in held]
    if languages is not None:
        langs = {normalize_language(lang) for lang in languages}
        keep = [r for r in keep if r.language in langs]
    if groups is not None:
        wanted = {check_group(g) for g in groups}
        keep = [r for r in keep if r.task_type in wanted]
    return keep[:limit] if limit is not None else keep


def edit_path(root: str | Path, model: str, row: GEditRow) -> Path:
    """``<root>/<model>/fullset/<task_type>/<lang>/<key>.png``."""
    return Path(root) / model / "fullset" / row.task_type / row.language / f"{row.key}.png"


def source_path(root: str | Path, model: str, row: GEditRow) -> Path:
    """``<root>/<model>/fullset/<task_type>/<lang>/<key>_SRCIMG.png``."""
    return edit_path(root, model, row).with_name(f"{row.key}_SRCIMG.png")


def open_image(path: str | Path | Image.Image, what: str) -> Image.Image:
    """A loaded image (decoded now, so a corrupt file fails here).

    Raises:
        PathNotFoundError: the file does not exist.
        InvalidImageError: it is not a readable image.
    """
    if isinstance(path, Image.Image):
        return path
    path = Path(path)
    if not path.is_file():
        raise PathNotFoundError(f"{what} {str(path)!r} does not exist.")
    try:
        image = Image.open(path)
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise InvalidImageError(
            f"{what} {str(path)!r} is not a readable image ({err}); regenerate it or delete it "
            "so the generate stage writes it again."
        ) from None
    return image
