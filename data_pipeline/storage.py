"""Small, crash-safe file helpers shared by every pipeline stage.

Every stage output is written atomically (temporary file in the same folder, then
``os.replace``), so a killed process leaves either the old file or the new one,
never half of one. Append-only stores flush and ``fsync`` every record.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
    >>> write_jsonl(path, [{"a": 1}, {"a": 2}])
    >>> [r["a"] for r in read_jsonl(path)]
    [1, 2]
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paco_reward.atomic_io import atomic_write_bytes, atomic_write_text
from paco_reward.errors import PacoError

if TYPE_CHECKING:  # a type only: reading and writing JSONL needs no PIL
    from PIL import Image

logger = logging.getLogger(__name__)


class DataPipelineError(PacoError, ValueError):
    """A pipeline input (file, record, ranking) is missing or malformed, or a stage could not
    read it (a config field raises :class:`~paco_reward.errors.ConfigError`). The base of the
    package's own errors (the annotation app's, ``ReasonRejected``)."""


def stable_id(*parts: Any, length: int = 16) -> str:
    """A short, deterministic id: sha1 of the parts joined by ``|``.

    >>> stable_id("0003", 1, "consistency") == stable_id("0003", 1, "consistency")
    True
    """
    text = "|".join(str(p) for p in parts)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:length]


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write one JSON document atomically (indented, UTF-8)."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Write records as JSON lines atomically."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def read_jsonl(path: str | os.PathLike, *, skip_truncated_tail: bool = False) -> list[dict]:
    """Read JSON lines, skipping blank lines.

    Args:
        skip_truncated_tail: tolerate an unparsable *last* line (a record cut by a crash in
            an append-only store); any other bad line raises.

    Raises:
        DataPipelineError: if the file is missing or a line is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise DataPipelineError(f"No JSONL file at {str(path)!r}; run the stage that writes it.")
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if skip_truncated_tail and number == len(lines):
                logger.warning("%s: ignoring truncated last line %d (%s)", path, number, err)
                continue
            raise DataPipelineError(f"{path}:{number}: not valid JSON ({err}).") from None
        if not isinstance(record, dict):
            raise DataPipelineError(f"{path}:{number}: expected a JSON object, got {record!r:.80}.")
        records.append(record)
    return records


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Iterate over the records of a JSONL file (see :func:`read_jsonl`)."""
    yield from read_jsonl(path)


class AppendOnlyJsonl:
    """An append-only JSONL store: every record is flushed and fsync'ed before
    :meth:`append` returns, so a killed process loses at most the record being written
    (a truncated tail line, which :meth:`load` ignores and later appends repair).

    >>> import tempfile, pathlib
    >>> store = AppendOnlyJsonl(pathlib.Path(tempfile.mkdtemp()) / "s.jsonl")
    >>> store.append({"id": "x"}); len(store.load())
    1
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> list[dict]:
        """All complete records. Lines cut by a crash (not valid JSON) are skipped with a
        warning: in an append-only store they can only be remnants of a killed write."""
        if not self.path.is_file():
            return []
        records, broken = [], 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                broken += 1
                continue
            if isinstance(record, dict):
                records.append(record)
        if broken:
            logger.warning("%s: skipped %d incomplete line(s) left by a crash", self.path, broken)
        return records

    def append(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        # A crash may have left a partial last line; start on a fresh line then.
        needs_newline = False
        if self.path.is_file() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as handle:
                handle.seek(-1, os.SEEK_END)
                needs_newline = handle.read(1) != b"\n"
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(("\n" if needs_newline else "") + line)
            handle.flush()
            os.fsync(handle.fileno())


def copy_atomic(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy a file so that ``dst`` is either absent or complete."""
    atomic_write_bytes(dst, Path(src).read_bytes())


def save_image_atomic(image: Image.Image, path: str | os.PathLike) -> None:
    """Save a PIL image as PNG atomically."""
    import io as _io  # stdlib

    buffer = _io.BytesIO()
    image.save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())
