"""Shared pieces of the benchmarks: scorer specs, resumable JSONL, tables and plots.

Scorer specs (``--scorer`` on every benchmark command line), optionally prefixed
with a display name as ``NAME=SPEC``:

==========================  ======================================================
``paco:<model_dir_or_id>``  :class:`paco_reward.PacoReward` (``--adapter`` adds a LoRA)
``server:<url>[@model]``    a remote PaCo-Reward (vLLM / ``paco-reward serve``)
``clip:<model_dir_or_id>``  :class:`paco_reward.baselines.CLIPImageScorer` (CLIP-I)
``pixel[:size]``            :class:`paco_reward.baselines.PixelScorer`
``dreamsim[:cache_dir]``    :class:`paco_reward.baselines.DreamSimScorer` (optional)
``open_clip:<model>[@tag]`` :class:`paco_reward.baselines.OpenCLIPScorer` (optional)
==========================  ======================================================
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from paco_eval.errors import BenchmarkDataError
from paco_eval.pair_scorers import PacoPairScorer, build_baseline
from paco_reward.atomic_io import atomic_write_text, save_figure
from paco_reward.command_line import config_field
from paco_reward.errors import ConfigError, InputError

logger = logging.getLogger(__name__)

SCORER_KINDS = ("paco", "server", "clip", "pixel", "dreamsim", "open_clip")

# Re-exported: the scorers and the data error are paco_eval's (the wheel has them).
__all__ = ["BenchmarkDataError", "JsonlRows", "NamedScorer", "PacoPairScorer", "build_scorer"]


@dataclass
class NamedScorer:
    """A scorer and the name it is reported under."""

    name: str
    scorer: Any
    spec: str


def parse_scorer_spec(spec: str) -> tuple[str | None, str, str]:
    """Split ``[NAME=]KIND[:ARG]`` into ``(name, kind, arg)``.

    Example:
        >>> parse_scorer_spec("ours=paco:/models/tiny")
        ('ours', 'paco', '/models/tiny')
        >>> parse_scorer_spec("pixel")
        (None, 'pixel', '')
    """
    name = None
    head, sep, rest = spec.partition("=")
    if sep and ":" not in head and head.strip():
        name, spec = head.strip(), rest
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    if kind not in SCORER_KINDS:
        raise ConfigError(
            f"Unknown scorer {spec!r}: the kind must be one of {list(SCORER_KINDS)}, e.g. "
            "'paco:/path/to/model', 'clip:openai/clip-vit-large-patch14' or 'pixel'."
        )
    if kind in ("paco", "server", "clip", "open_clip") and not arg:
        raise ConfigError(f"Scorer {spec!r} needs an argument: '{kind}:<model dir, id or url>'.")
    return name, kind, arg


def build_scorer(
    spec: str,
    *,
    adapter: str | None = None,
    device: str | None = None,
    template: str = "rank",
    batch_size: int = 8,
) -> NamedScorer:
    """Build a scorer from a spec (see the module docstring).

    Args:
        spec: ``[NAME=]KIND[:ARG]``.
        adapter: LoRA adapter folder for ``paco:`` scorers.
        device: torch device for model scorers.
        template: PacoReward template for :meth:`PacoPairScorer.score_pairs`.
        batch_size: pairs per forward pass for PacoReward.

    Raises:
        ValueError: an unknown kind or a missing argument.
    """
    name, kind, arg = parse_scorer_spec(spec)
    if kind == "paco":
        from paco_reward import PacoReward

        reward = PacoReward.from_pretrained(
            arg, adapter=adapter, device=device, batch_size=batch_size
        )
        label = name or f"PaCo ({Path(arg).name})"
        return NamedScorer(label, PacoPairScorer(reward, template, label), spec)
    if kind == "server":
        from paco_reward import PacoReward

        if not hasattr(PacoReward, "from_server"):
            raise InputError("This paco_reward build has no PacoReward.from_server; use 'paco:'.")
        url, _, model = arg.partition("@")
        reward = PacoReward.from_server(url, model=model or None)
        label = name or f"PaCo server ({model or url})"
        return NamedScorer(label, PacoPairScorer(reward, template, label), spec)
    if kind in ("clip", "pixel", "dreamsim"):
        labels = {"clip": f"CLIP-I ({Path(arg).name})", "pixel": "Pixel L1", "dreamsim": "DreamSim"}
        return NamedScorer(name or labels[kind], build_baseline(kind, arg, device), spec)
    from paco_reward.baselines import OpenCLIPScorer

    model, _, tag = arg.partition("@")
    return NamedScorer(name or f"OpenCLIP ({model})", OpenCLIPScorer(model, tag or None), spec)


@dataclass(kw_only=True)
class ScorerArguments:
    """The scorer options every human-alignment benchmark takes (its command line is
    generated from the fields, see :mod:`paco_reward.command_line`)."""

    scorer: list[str] = config_field(
        help="[NAME=]KIND[:ARG], repeatable: paco:<dir>, server:<url>[@model], clip:<dir>, "
        "pixel[:size], dreamsim[:cache], open_clip:<model>[@tag]."
    )
    adapter: str | None = config_field(None, help="LoRA adapter for paco: scorers.")
    device: str | None = config_field(None, help="torch device (default: cuda if available).")
    batch_size: int = config_field(8, help="PacoReward pairs per forward.")

    def __post_init__(self) -> None:
        if not self.scorer:
            raise ConfigError("give at least one --scorer, e.g. --scorer pixel.")
        for spec in self.scorer:  # a typo fails before any data or model loads
            parse_scorer_spec(spec)

    def build_scorers(self, template: str = "rank") -> list[NamedScorer]:
        """Every ``--scorer``, built (:func:`build_scorer`)."""
        return [
            build_scorer(
                spec,
                adapter=self.adapter,
                device=self.device,
                template=template,
                batch_size=self.batch_size,
            )
            for spec in self.scorer
        ]


def slug(name: str) -> str:
    """A file-system-safe version of a method name."""
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("_")
    return out or "scorer"


def check_run_config(method_dir: Path, named: NamedScorer) -> None:
    """Record what produced the resumable results in ``method_dir`` (``run.json``), and
    refuse to resume results made by a different scorer spec or template.

    Raises:
        BenchmarkDataError: ``method_dir`` holds results of another configuration.
    """
    config = {"spec": named.spec, "template": getattr(named.scorer, "template", None)}
    path = Path(method_dir) / "run.json"
    if path.exists():
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous != config:
            raise BenchmarkDataError(
                f"{method_dir} holds results of {previous}, not {config}; resuming would mix "
                "them. Use another --output-dir, another NAME=, or delete that folder."
            )
        return
    write_json_atomic(path, config)


# ---------------------------------------------------------------------- JSONL
class JsonlRows:
    """A per-method results file of ``python -m benchmarks.*`` (rows without a header;
    ``run.json`` beside it says what made them) behind the methods the scoring functions of
    :mod:`paco_eval` use on a :class:`~paco_eval.harness.ResultsStore`: ``done_keys``,
    ``get``, ``append``."""

    def __init__(self, path: Path, key: str = "key") -> None:
        self.path = Path(path)
        self.key = key
        self._rows = {str(r[key]): r for r in read_jsonl(self.path) if key in r}

    def done_keys(self) -> set[str]:
        return set(self._rows)

    def get(self, key: str) -> dict | None:
        return self._rows.get(str(key))

    def rows(self) -> list[dict]:
        return list(self._rows.values())

    def append(self, rows: dict | Sequence[dict]) -> None:
        for row in [rows] if isinstance(rows, dict) else list(rows):
            append_jsonl(self.path, row)
            self._rows[str(row[self.key])] = row


def append_jsonl(path: Path, record: dict) -> None:
    """Append one JSON line atomically: the whole line goes out in a single ``write`` on an
    ``O_APPEND`` descriptor and is fsynced, so a crash leaves at most one torn last line,
    which :func:`read_jsonl` drops."""
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSONL file; an unparsable line (a torn write) is logged and dropped."""
    if not path.exists():
        return []
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning(
                    "%s:%d is not valid JSON (interrupted write?); ignored.", path, lineno
                )
    return records


def write_json_atomic(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, default=_json_default))


def _json_default(obj: Any):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


# ---------------------------------------------------------------------- tables
def _cell(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(
    header: Sequence[str], rows: Iterable[Sequence[Any]], fmt: str = "txt", digits: int = 3
) -> str:
    """Render a table as plain text (``txt``), GitHub markdown (``md``) or LaTeX (``tex``).

    Example:
        >>> print(format_table(["m", "acc"], [["ours", 0.5]], "md"))
        | m | acc |
        |---|---|
        | ours | 0.500 |
    """
    cells = [[_cell(c, digits) for c in row] for row in rows]
    if fmt == "md":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(lines)
    if fmt == "tex":

        def esc(s: str) -> str:
            for a, b in (
                ("\\", "\\textbackslash{}"),
                ("_", "\\_"),
                ("&", "\\&"),
                ("%", "\\%"),
                ("#", "\\#"),
            ):
                s = s.replace(a, b)
            return s

        lines = [
            "\\begin{tabular}{l" + "c" * (len(header) - 1) + "}",
            "\\toprule",
            " & ".join(esc(h) for h in header) + " \\\\",
            "\\midrule",
        ]
        lines += [" & ".join(esc(c) for c in r) + " \\\\" for r in cells]
        lines += ["\\bottomrule", "\\end{tabular}"]
        return "\n".join(lines)
    if fmt != "txt":
        raise InputError(f"fmt={fmt!r} is not a table format; use 'txt', 'md' or 'tex'.")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def write_tables(stem: Path, header: Sequence[str], rows: list[Sequence[Any]]) -> dict[str, Path]:
    """Write ``stem``.txt / .md / .tex atomically; return the paths by format."""
    paths = {}
    for fmt in ("txt", "md", "tex"):
        path = stem.with_suffix(f".{fmt}")
        atomic_write_text(path, format_table(header, rows, fmt) + "\n")
        paths[fmt] = path
    return paths


def bar_chart(
    path: Path,
    methods: Sequence[str],
    metrics: Sequence[str],
    values: Sequence[Sequence[float]],
    title: str,
) -> Path:
    """Grouped bar chart (metrics on the x axis, one bar per method) saved as PNG with the
    Agg backend. NaN values are drawn as empty bars."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 1.3 * len(metrics) + 2), 4.0))
    ax = fig.add_subplot(1, 1, 1)
    n = max(len(methods), 1)
    width = 0.8 / n
    x = np.arange(len(metrics))
    for k, (method, row) in enumerate(zip(methods, values)):
        heights = np.nan_to_num(np.asarray(row, dtype=np.float64), nan=0.0)
        ax.bar(x + (k - (n - 1) / 2) * width, heights, width, label=method)
    ax.set_xticks(x)
    ax.set_xticklabels(metrics, rotation=15)
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
