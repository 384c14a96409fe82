"""Stage 8: counts per stage, label balance, per-category counts and agreement.

>>> rows = stats_rows({"prompts": 2, "pairs": {"total": 4, "consistent": 2}})
>>> rows[0]
['prompts', '2']
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from data_pipeline.storage import AppendOnlyJsonl, read_jsonl, write_json

logger = logging.getLogger(__name__)

STATS_FILE = "stats.json"


def _count(path: Path) -> int | None:
    return len(read_jsonl(path, skip_truncated_tail=True)) if path.is_file() else None


def compute_stats(work_dir: str | Path, export_dir: str | Path | None = None) -> dict:
    """Collect the statistics of a work folder (stages not run yet are ``None``)."""
    work_dir = Path(work_dir)
    export_dir = Path(export_dir) if export_dir is not None else work_dir / "export"
    stats: dict = {
        "prompts": _count(work_dir / "prompts.jsonl"),
        "grids": _count(work_dir / "grids.jsonl"),
        "panels": _count(work_dir / "panels.jsonl"),
        "instances": _count(work_dir / "instances.jsonl"),
        "ranked_instances": _count(work_dir / "rankings.jsonl"),
    }
    if stats["instances"] and stats["prompts"]:
        stats["instances_per_prompt"] = stats["instances"] / stats["prompts"]
    agreement = work_dir / "agreement.json"
    stats["agreement"] = json.loads(agreement.read_text()) if agreement.is_file() else None
    pairs_path = work_dir / "pairs.jsonl"
    if pairs_path.is_file():
        pairs = read_jsonl(pairs_path)
        labels = Counter(int(p["label"]) for p in pairs)
        by_category: dict[str, dict[str, int]] = {}
        for p in pairs:
            entry = by_category.setdefault(p["category"], {"consistent": 0, "inconsistent": 0})
            entry["consistent" if p["label"] else "inconsistent"] += 1
        stats["pairs"] = {
            "total": len(pairs),
            "consistent": labels[1],
            "inconsistent": labels[0],
            "consistent_fraction": labels[1] / len(pairs) if pairs else None,
            "by_source": dict(Counter(p["source"] for p in pairs)),
            "by_category": dict(sorted(by_category.items())),
        }
        reasons_path = work_dir / "reasons.jsonl"
        if reasons_path.is_file():
            stored = {r["pair_id"]: r for r in AppendOnlyJsonl(reasons_path).load()}
            done = [p for p in pairs if p["pair_id"] in stored]
            attempts = [stored[p["pair_id"]].get("attempts", 1) for p in done]
            stats["reasons"] = {
                "done": len(done),
                "missing": len(pairs) - len(done),
                "mean_attempts": sum(attempts) / len(attempts) if attempts else None,
                "teachers": dict(Counter(stored[p["pair_id"]].get("teacher") for p in done)),
            }
    info = export_dir / "export_info.json"
    if info.is_file():
        export_info = json.loads(info.read_text())
        stats["export"] = {
            "rows": export_info["rows"],
            "test_prompts": len(export_info["test_prompts"]),
        }
        rank = export_dir / "consistency_rank" / "consistency_full_rank.jsonl"
        if rank.is_file():
            stats["export"]["consistency_rank_instances"] = _count(rank)
    return stats


def write_stats(
    work_dir: str | Path, export_dir: str | Path | None = None, plot: bool = True
) -> dict:
    """Stage 8: compute the statistics, write ``<work_dir>/stats.json`` and (with
    matplotlib installed and ``plot=True``) ``<work_dir>/stats.png``."""
    stats = compute_stats(work_dir, export_dir)
    write_json(Path(work_dir) / STATS_FILE, stats)
    if plot and stats.get("pairs"):
        plot_stats(stats, Path(work_dir) / "stats.png")
    return stats


def plot_stats(stats: dict, path: str | Path) -> Path | None:
    """A bar chart of consistent / inconsistent pairs per category. Returns the path, or
    ``None`` if matplotlib is not installed (``pip install matplotlib`` to get the plot)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.info("matplotlib not installed; no stats plot (pip install matplotlib).")
        return None
    categories = stats["pairs"]["by_category"]
    names = list(categories)
    xs = range(len(names))
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(names)), 3.2))
    yes = [categories[n]["consistent"] for n in names]
    no = [categories[n]["inconsistent"] for n in names]
    ax.bar([x - 0.2 for x in xs], yes, width=0.4, label="consistent (Yes)")
    ax.bar([x + 0.2 for x in xs], no, width=0.4, label="inconsistent (No)")
    ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("pairs")
    ax.set_title(f"{stats['pairs']['total']} pairs by category")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
    return path


def _flatten(prefix: str, value, rows: list[list[str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, rows)
    elif value is not None:
        rows.append([prefix, f"{value:.4f}" if isinstance(value, float) else str(value)])


def stats_rows(stats: dict) -> list[list[str]]:
    """The statistics as ``[name, value]`` rows (nested keys joined by dots)."""
    rows: list[list[str]] = []
    _flatten("", stats, rows)
    return rows


def format_table(stats: dict) -> str:
    """A plain two-column text table of the statistics."""
    rows = stats_rows(stats)
    width = max((len(r[0]) for r in rows), default=4)
    lines = [f"{'statistic'.ljust(width)}  value", f"{'-' * width}  -----"]
    lines += [f"{name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines)
