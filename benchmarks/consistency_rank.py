"""ConsistencyRank: does a scorer rank candidates against a reference the way people do?

Several scorers side by side, with the paper's rows (one judge at a time, on the harness that
VCReward-Bench and EditReward-Bench share: ``paco-eval consistency_rank judge --judge ...``).
The loading, scoring and metrics are :mod:`paco_eval.consistency_rank.bench`'s.

Run::

    python -m benchmarks.consistency_rank --data-dir ConsistencyRank \\
        --scorer paco:X-GenGroup/PaCo-Reward-7B --scorer clip:openai/clip-vit-large-patch14 \\
        --scorer pixel --output-dir results/consistency_rank

Dataset layout (the official release)::

    <data-dir>/images/<folder>/<gen>_<pos>.png
    <data-dir>/prompt_data.jsonl            {"idx": <folder>, "prompt": ..., ["category": ...]}
    <data-dir>/consistency_full_rank.jsonl  {"folder", "ref_image", "comp_images", "rank_images"}

(``ref_img`` / ``comparison_images`` are accepted for ``ref_image`` / ``comp_images``.)
Every candidate is scored as the pair (reference, candidate); candidates are ranked
by score and compared with ``rank_images`` using
:func:`paco_reward.metrics.ranking_metrics` (definitions and tie rule there).
PacoReward scorers use the theme-free ``rank`` template unless ``--template`` says
otherwise.

Outputs in ``--output-dir``: ``<method>/results.jsonl`` (one line per item, appended
atomically; a re-run skips items already there), ``summary.json``,
``summary.{txt,md,tex}`` (with the paper's numbers), ``by_category.{txt,md,tex}``
when the prompt data has categories, and ``metrics.png`` (methods x metrics).
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    BenchmarkDataError,
    JsonlRows,
    NamedScorer,
    ScorerArguments,
    bar_chart,
    check_run_config,
    format_table,
    slug,
    write_json_atomic,
    write_tables,
)
from paco_eval.consistency_rank.bench import (
    CHART_METRICS,
    PAPER_RESULTS,
    TABLE_COLUMNS,
    RankItem,
    load_consistency_rank,
    summarize,
    summary_rows,
)
from paco_eval.consistency_rank.bench import score_items as _score_items
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError, InputError
from paco_reward.metrics import TIE_RULES

__all__ = [
    "PAPER_RESULTS",
    "BenchmarkDataError",
    "RankItem",
    "evaluate_scorer",
    "load_consistency_rank",
    "main",
    "run_benchmark",
    "slug",
    "summarize",
    "summary_rows",
]

logger = logging.getLogger(__name__)

PROG = "python -m benchmarks.consistency_rank"

def evaluate_scorer(
    items: Sequence[RankItem],
    scorer: Any,
    results_path: Path,
    image_dir: Path,
    *,
    items_per_batch: int = 8,
    ties: str = "first",
    progress: bool = True,
) -> list[dict]:
    """Score every item not yet in ``results_path`` (a per-method JSONL, resumable) and
    return the records of ``items`` in their order (:func:`score_items` over that file)."""
    return _score_items(items, scorer, JsonlRows(results_path), image_dir,
                        items_per_batch=items_per_batch, ties=ties, progress=progress)  # fmt: skip


def run_benchmark(
    data_dir: str | Path,
    scorers: Sequence[NamedScorer],
    output_dir: str | Path,
    *,
    items_per_batch: int = 8,
    ties: str = "first",
    category_field: str = "category",
    limit: int | None = None,
    progress: bool = True,
) -> dict[str, dict]:
    """Evaluate each scorer on a ConsistencyRank folder and write all outputs.

    Returns:
        ``{method name: {"overall": metrics, ["by_category": {...}]}}``.

    Example:
        >>> from benchmarks.common import build_scorer
        >>> run_benchmark("ConsistencyRank", [build_scorer("pixel")], "out")  # doctest: +SKIP
    """
    if ties not in TIE_RULES:
        raise InputError(f"ties={ties!r} is not a tie rule; use one of {TIE_RULES}.")
    data_dir, output_dir = Path(data_dir), Path(output_dir)
    items = load_consistency_rank(data_dir, category_field=category_field)
    if limit is not None:
        items = items[:limit]
    names = [s.name for s in scorers]
    if len(set(names)) != len(names):
        raise ConfigError(f"Scorer names must be unique; got {names}. Use NAME=SPEC to rename.")
    results: dict[str, dict] = {}
    for named in scorers:
        check_run_config(output_dir / slug(named.name), named)
        records = evaluate_scorer(
            items,
            named.scorer,
            output_dir / slug(named.name) / "results.jsonl",
            data_dir / "images",
            items_per_batch=items_per_batch,
            ties=ties,
            progress=progress,
        )
        results[named.name] = summarize(records, ties)
    write_outputs(results, output_dir, ties=ties)
    return results


def write_outputs(results: dict[str, dict], output_dir: Path, ties: str = "first") -> dict:
    """summary.json, summary.{txt,md,tex}, by_category.{txt,md,tex} and metrics.png."""
    output_dir = Path(output_dir)
    write_json_atomic(
        output_dir / "summary.json", {"ties": ties, "methods": results, "paper": PAPER_RESULTS}
    )
    header, rows = summary_rows(results)
    paths = write_tables(output_dir / "summary", header, rows)
    cat_rows = [
        [name, cat, m["n_items"]] + [m[key] for key, _ in TABLE_COLUMNS]
        for name, s in results.items()
        for cat, m in s.get("by_category", {}).items()
    ]
    if cat_rows:
        cat_header = ["method", "category", "n"] + [label for _, label in TABLE_COLUMNS]
        paths.update(
            {
                f"category_{k}": v
                for k, v in write_tables(output_dir / "by_category", cat_header, cat_rows).items()
            }
        )
    methods = list(results) + [f"paper: {n}" for n in PAPER_RESULTS]
    values = [[results[m]["overall"][k] for k in CHART_METRICS] for m in results]
    values += [[PAPER_RESULTS[n].get(k, math.nan) for k in CHART_METRICS] for n in PAPER_RESULTS]
    paths["png"] = bar_chart(
        output_dir / "metrics.png", methods, CHART_METRICS, values, "ConsistencyRank"
    )
    return paths


@dataclass(kw_only=True)
class ConsistencyRankArguments(ScorerArguments):
    """ConsistencyRank: does a scorer rank candidates against a reference the way people do?"""

    data_dir: str = config_field(help="ConsistencyRank folder (the official layout).")
    template: str = config_field("rank", help="PacoReward template (default: rank).")
    output_dir: str = config_field(
        "results/consistency_rank", help="Where per-method results, tables and the chart go."
    )
    items_per_batch: int = config_field(8, help="Items per score_pairs call.")
    ties: str = config_field(
        "first",
        help=f"Order of tied scores, one of {list(TIE_RULES)}: 'first' (lower index first) or "
        "'last' (= the released evaluator's np.argsort(scores)[::-1] under numpy 1.x, n <= 16). "
        "The summary counts tied items.",
    )
    category_field: str = config_field("category", help="prompt_data category key.")
    limit: int | None = config_field(None, help="Evaluate the first N items only.")
    progress: bool = config_field(True, help="Show progress bars (--no_progress hides them).")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ties not in TIE_RULES:
            raise ConfigError(f"ties must be one of {list(TIE_RULES)}; got {self.ties!r}.")


def run(args: ConsistencyRankArguments) -> int:
    """Run the benchmark as ``args`` say and print the summary table."""
    results = run_benchmark(
        args.data_dir,
        args.build_scorers(args.template),
        args.output_dir,
        items_per_batch=args.items_per_batch,
        ties=args.ties,
        category_field=args.category_field,
        limit=args.limit,
        progress=args.progress,
    )
    header, rows = summary_rows(results)
    print("\n== ConsistencyRank (tau_ref/rho_ref: released-evaluator definitions, as the paper) ==")
    print(format_table(header, rows))
    print(f"\nOutputs in {args.output_dir}/ (summary.{{txt,md,tex,json}}, metrics.png)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the summary table and returns an exit status."""
    command = Command("consistency-rank", ConsistencyRankArguments, run, "Run ConsistencyRank.")
    return run_cli(PROG, __doc__.split("\n\n")[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
