"""The pieces every benchmark shares: the evaluation mode, the resumable results store and
the report writer.

**Results store.** One JSONL file per judge under the output folder: a header line holding a
fingerprint of the inputs (image folder contents, judge, prompt, selection), then one row per
item key. Each row is appended with one ``write`` + ``fsync``, so a killed judge leaves whole
rows (a torn last line is dropped on reopening); a re-run skips the keys already there. A
file whose fingerprint is not this run's raises :class:`~paco_eval.errors.StaleResultsError`
instead of mixing two runs.

**Report.** ``report.json`` + ``report.md``: the headline table (beside the paper's rows),
per group, per item, coverage and protocol, written atomically.

**Mode.** ``reference`` reproduces the released evaluation code, quirks included, so the
numbers equal it; ``default`` is the same arithmetic with the quirks fixed.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> store = ResultsStore(folder / "judge.jsonl", fingerprint=fingerprint({"images": "a"}))
    >>> store.append({"key": "0001_0001", "score": 0.5})
    >>> ResultsStore(folder / "judge.jsonl", fingerprint=fingerprint({"images": "a"})).done_keys()
    {'0001_0001'}
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from paco_eval.errors import StaleResultsError
from paco_reward.atomic_io import atomic_write_text
from paco_reward.errors import ConfigError

__all__ = [
    "MODES",
    "Mode",
    "Report",
    "ResultsStore",
    "RowStore",
    "check_mode",
    "file_fingerprint",
    "fingerprint",
    "library_versions",
    "mean_or_none",
    "write_report",
]

logger = logging.getLogger(__name__)

Mode = Literal["reference", "default"]
MODES: tuple[str, ...] = ("reference", "default")
_FORMAT = 1  # the results file's layout; a file of another is refused like a stale one


def check_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`MODES`.

    Raises:
        ConfigError: naming the value and the choices.
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {list(MODES)}; got {mode!r}.")
    return mode


def fingerprint(payload: Any) -> str:
    """A short stable hash of a JSON-able ``payload`` (keys sorted), for a results header.

    Example:
        >>> fingerprint({"b": 1, "a": [2]}) == fingerprint({"a": [2], "b": 1})
        True
    """
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def file_fingerprint(paths: Iterable[str | os.PathLike]) -> str:
    """A hash of files' names, sizes and contents (the images a judge scores): two image
    folders differ in it unless they hold the same bytes under the same names. A missing
    file counts as absent, so adding it later changes the fingerprint."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        digest.update(path.name.encode("utf-8") + b"\0")
        if path.is_file():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            digest.update(b"absent")
    return digest.hexdigest()[:16]


def mean_or_none(values: Iterable[float]) -> float | None:
    """The mean of ``values``, or ``None`` for none (never a silent 0.0)."""
    values = list(values)
    return sum(values) / len(values) if values else None


class RowStore(Protocol):
    """Where scored rows go: a :class:`~paco_eval.harness.ResultsStore` (``paco-eval``), or
    the per-method JSONL of ``python -m benchmarks.*``."""

    def done_keys(self) -> set[str]: ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def append(self, rows: Any) -> None: ...


class ResultsStore:
    """A JSONL file of one row per item key, resumable, refusing another run's file.

    Args:
        path: the file (created with its header on the first append).
        fingerprint: the hash of this run's inputs (:func:`fingerprint`); a file holding
            another raises :class:`~paco_eval.errors.StaleResultsError`.
        header: more JSON-able facts to keep in the header (judge id, prompt hash, ...).
        key: the row field holding the item key.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "r.jsonl"
        >>> ResultsStore(path, fingerprint="aa").append({"key": "x", "v": 1})
        >>> ResultsStore(path, fingerprint="bb")
        Traceback (most recent call last):
        ...
        paco_eval.errors.StaleResultsError: ...
    """

    def __init__(self, path: str | os.PathLike, *, fingerprint: str,
                 header: Mapping[str, Any] | None = None, key: str = "key") -> None:  # fmt: skip
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.header = {"format": _FORMAT, "fingerprint": fingerprint, **dict(header or {})}
        self.key = key
        self._rows: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        lines = self.path.read_bytes().split(b"\n")
        complete, torn = lines[:-1], lines[-1]  # the text after the last newline is torn
        if not complete:
            if torn:
                logger.warning("%s: dropping a torn header line", self.path)
            self.path.unlink()
            return
        try:
            head = json.loads(complete[0])["header"]
        except (ValueError, KeyError, TypeError):
            raise StaleResultsError(
                f"{self.path} is not a paco-eval results file (no header line); "
                "delete it or choose another --output_dir.", path=str(self.path),
                expected=self.fingerprint) from None  # fmt: skip
        found = str(head.get("fingerprint"))
        if head.get("format") != _FORMAT or found != self.fingerprint:
            raise StaleResultsError(
                f"{self.path} holds results for other inputs (fingerprint {found}, this run "
                f"{self.fingerprint}: another image folder, judge, prompt or case selection). "
                "Delete the file to re-score, or use another --output_dir.",
                path=str(self.path), expected=self.fingerprint, found=found)  # fmt: skip
        self.header = head
        for line in complete[1:]:
            if not line.strip():
                continue
            row = json.loads(line)
            self._rows[str(row[self.key])] = row
        if torn:  # a row cut by a kill: drop it, it is scored again
            logger.warning("%s: dropping a torn last row (line %d)", self.path, len(complete) + 1)
            atomic_write_text(self.path, b"\n".join(complete).decode("utf-8") + "\n")

    # ------------------------------------------------------------------ reading
    def done_keys(self) -> set[str]:
        """The keys already scored."""
        return set(self._rows)

    def __contains__(self, key: object) -> bool:
        return str(key) in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._rows.get(str(key))

    def rows(self) -> list[dict[str, Any]]:
        """The rows, in the order they were written."""
        return list(self._rows.values())

    # ------------------------------------------------------------------ writing
    def append(self, rows: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Append one row or several (each with its key), durably, in one write."""
        rows = [rows] if isinstance(rows, Mapping) else list(rows)
        if not rows:
            return
        for row in rows:
            if self.key not in row:
                raise ValueError(f"a results row needs its {self.key!r}; got keys {sorted(row)}.")
        chunk = "".join(json.dumps(dict(r), sort_keys=True, default=_json_default) + "\n" for r in rows)
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            header = json.dumps({"header": self.header}, sort_keys=True, default=str) + "\n"
            atomic_write_text(self.path, header)  # the header appears whole or not at all
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, chunk.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        for row in rows:
            self._rows[str(row[self.key])] = dict(row)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # a numpy / torch scalar
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def library_versions(*packages: str) -> dict[str, str]:
    """The installed versions of ``packages`` (and paco-rl, torch, transformers) for a protocol."""
    from importlib import metadata

    names = ("paco-rl", "torch", "transformers", *packages)
    out = {}
    for name in dict.fromkeys(names):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


# ---------------------------------------------------------------------- report
@dataclass
class Report:
    """What a benchmark's report stage writes (see :func:`write_report`).

    Args:
        benchmark: its name (``t2is``).
        mode: ``reference`` or ``default``.
        columns: the headline table's columns, in order.
        table: column -> this run's value (``None`` where nothing was scored).
        groups: group (category) -> column -> value.
        items: item key -> its values (anything JSON-able; numbers shown in the markdown).
        coverage: what was found and scored against what the benchmark has.
        protocol: judge ids, prompt hash, dtype, resize, library versions.
        paper_rows: row label -> column -> the paper's value, shown beside this run.
        notes: lines printed above the table (what is a fit, what is not the paper's model).
        title: the markdown's heading.
    """

    benchmark: str
    mode: str
    columns: list[str]
    table: dict[str, float | None]
    groups: dict[str, dict[str, float | None]] = field(default_factory=dict)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    coverage: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, Any] = field(default_factory=dict)
    paper_rows: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    title: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cell(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def render_markdown(report: Report) -> str:
    """The markdown of a report (the text of ``report.md``)."""
    lines = [f"# {report.title or report.benchmark} ({report.mode} mode)", ""]
    lines += [f"- {note}" for note in report.notes] + ([""] if report.notes else [])
    lines += ["## Table", ""]
    rows = [["this run", *[report.table.get(c) for c in report.columns]]]
    rows += [[label, *[values.get(c) for c in report.columns]] for label, values in report.paper_rows.items()]
    lines += _md_table(["", *report.columns], rows) + [""]
    if report.groups:
        lines += ["## Per group", ""]
        lines += _md_table(["group", *report.columns],
                           [[g, *[v.get(c) for c in report.columns]] for g, v in report.groups.items()])  # fmt: skip
        lines.append("")
    if report.coverage:
        lines += ["## Coverage", "", "```json", json.dumps(report.coverage, indent=2, sort_keys=True), "```", ""]
    if report.protocol:
        lines += ["## Protocol", "", "```json", json.dumps(report.protocol, indent=2, sort_keys=True), "```", ""]
    if report.items:
        keys = [k for k in next(iter(report.items.values()))]
        lines += ["## Per item", ""]
        lines += _md_table(["item", *keys], [[item, *[v.get(k) for k in keys]] for item, v in report.items.items()])
        lines.append("")
    return "\n".join(lines)


def write_report(report: Report, output_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` into ``output_dir`` (atomically); their paths.

    Example:
        >>> import tempfile
        >>> r = Report("toy", "default", ["A"], {"A": 0.5}, paper_rows={"paper": {"A": 0.6}})
        >>> json_path, md_path = write_report(r, tempfile.mkdtemp())
        >>> "| this run | 0.5000 |" in md_path.read_text()
        True
    """
    output_dir = Path(output_dir)
    json_path, md_path = output_dir / "report.json", output_dir / "report.md"
    atomic_write_text(json_path, json.dumps(report.to_dict(), indent=2, sort_keys=False, default=_json_default) + "\n")
    atomic_write_text(md_path, render_markdown(report))
    return json_path, md_path
