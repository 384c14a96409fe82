"""State shared by the demo's stages."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ReportSection:
    """A table of the demo's report (stage ``report``), with the images that go with it."""

    heading: str
    title: str
    header: list[str]
    rows: list[list[Any]]
    images: list[tuple[Path, str]] = field(default_factory=list)  # (path, caption)


@dataclass
class DemoContext:
    output_dir: Path
    seed: int = 0
    artifacts: dict[str, Any] = field(default_factory=dict)
    report: list[ReportSection] = field(default_factory=list)

    def path(self, *parts: str) -> Path:
        p = self.output_dir.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def table(self, section: ReportSection) -> None:
        """Print ``section``'s table and keep it for the report."""
        print_table(section.title, section.header, section.rows)
        self.report.append(section)


def cache_dir() -> Path:
    """Where the demo caches its pretrained stand-ins (``PACO_RL_CACHE``, else
    ``~/.cache/paco-rl``)."""
    return Path(os.environ.get("PACO_RL_CACHE") or Path.home() / ".cache" / "paco-rl")


def make_reproducible(seed: int, threads: int = 1) -> None:
    """Fix what a rerun needs to give the same numbers: the seeds (Python, NumPy, torch),
    torch's CPU thread count (reductions split differently over a different number of
    threads, and one thread does not slow the tiny models down on a shared machine) and
    torch's deterministic algorithms where it has them."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)


def _cells(rows: list[list[Any]]) -> list[list[str]]:
    return [[f"{c:.4f}" if isinstance(c, float) else str(c) for c in row] for row in rows]


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """The rows of a :func:`print_table` table as a Markdown table (for the report)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in _cells(rows)]
    return "\n".join(lines)


def print_table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    """Print a plain-text table (the demo's terminal output format)."""
    cells = _cells(rows)
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    line = "  ".join("-" * w for w in widths)
    print(f"\n== {title} ==")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print(line)
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
