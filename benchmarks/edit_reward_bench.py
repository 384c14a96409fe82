"""EditReward-Bench (EditScore release): does a scorer prefer the edit people preferred?

Several scorers side by side, with the paper's row (one judge at a time, on the harness that
ConsistencyRank and VCReward-Bench share: ``paco-eval edit_reward_bench judge --judge ...``).
The loading, scoring and accuracy are :mod:`paco_eval.edit_reward.bench`'s.

Run::

    python -m benchmarks.edit_reward_bench --data EditReward-Bench \\
        --scorer paco:X-GenGroup/PaCo-Reward-7B --output-dir results/edit_reward_bench

Data: a local ``datasets`` folder (``Dataset.save_to_disk``; a ``DatasetDict`` uses its
``train`` split), a parquet file, or a folder of parquet files (a hub snapshot). Each
row is one human comparison with fields ``key`` (one id per output image),
``instruction``, ``input_image``, ``output_images`` (the preferred output first),
``task_type`` (13 types, see :data:`EDIT_TASK_GROUPS`) and ``dimension`` in
``prompt_following`` / ``consistency`` / ``overall``. A row with more than two outputs
contributes one comparison per non-preferred output (first vs each other).

Scoring: each unique output (by its key) is scored once and cached in
``<method>/scores.jsonl`` (resume skips cached keys).

- PacoReward scorers (``paco:``, ``server:``): exactly :meth:`PacoReward.score_edit`:
  ``consistency`` with the ``edit_consistency`` template, ``prompt_following`` with
  ``edit_following``, ``overall = sqrt(consistency * prompt_following)``.
- Any other scorer (CLIP-I, pixel, DreamSim, ...): its one similarity of
  (input, output) is used for all three dimensions. Image-similarity baselines cannot
  read the instruction, so on ``prompt_following`` they measure "changed little",
  which is the point of reporting them.

Metrics per task type and dimension: strict (preferred score ``>`` other) and non-strict
(``>=``) pairwise accuracy; the headline numbers are unweighted means over task types
(as EditScore's ``calculate_statistics.py``), plus group means over
:data:`EDIT_TASK_GROUPS`. Outputs: ``<method>/results.jsonl`` (per comparison),
``summary.json``, ``summary.{txt,md,tex}``, ``by_task.{txt,md,tex}``, ``metrics.png``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    BenchmarkDataError,
    JsonlRows,
    NamedScorer,
    ScorerArguments,
    append_jsonl,
    bar_chart,
    check_run_config,
    format_table,
    slug,
    write_json_atomic,
    write_tables,
)
from paco_eval.edit_reward.bench import (
    DIMENSIONS,
    EDIT_TASK_GROUPS,
    EDIT_TASK_TYPES,
    PAPER_RESULTS,
    compare,
    detail_rows,
    edit_rows,
    load_edit_reward_bench,
    score_outputs,
    summarize,
    summary_rows,
)
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError

__all__ = [
    "DIMENSIONS",
    "EDIT_TASK_GROUPS",
    "EDIT_TASK_TYPES",
    "PAPER_RESULTS",
    "BenchmarkDataError",
    "evaluate_scorer",
    "load_edit_reward_bench",
    "main",
    "run_benchmark",
    "summarize",
    "summary_rows",
]

logger = logging.getLogger(__name__)

PROG = "python -m benchmarks.edit_reward_bench"

def evaluate_scorer(
    ds,
    rows: Sequence[dict],
    named: NamedScorer,
    output_dir: Path,
    *,
    batch_outputs: int = 16,
    progress: bool = True,
) -> dict:
    """Score, write ``<method>/results.jsonl`` and return the method's summary."""
    method_dir = output_dir / slug(named.name)
    check_run_config(method_dir, named)
    store = JsonlRows(method_dir / "scores.jsonl")
    scores = score_outputs(
        ds, rows, named.scorer, store, batch_outputs=batch_outputs, progress=progress
    )
    comparisons = compare(rows, scores)
    results_path = method_dir / "results.jsonl"
    tmp = results_path.with_name("results.jsonl.tmp")
    tmp.unlink(missing_ok=True)
    for c in comparisons:
        append_jsonl(tmp, c)
    tmp.replace(results_path)
    return summarize(comparisons)


def run_benchmark(
    data: str | Path,
    scorers: Sequence[NamedScorer],
    output_dir: str | Path,
    *,
    batch_outputs: int = 16,
    limit: int | None = None,
    progress: bool = True,
) -> dict[str, dict]:
    """Evaluate each scorer on EditReward-Bench and write all outputs; return summaries.

    Example:
        >>> from benchmarks.common import build_scorer
        >>> run_benchmark("EditReward-Bench", [build_scorer("pixel")], "out")  # doctest: +SKIP
    """
    output_dir = Path(output_dir)
    ds = load_edit_reward_bench(data)
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    rows = edit_rows(ds)
    names = [s.name for s in scorers]
    if len(set(names)) != len(names):
        raise ConfigError(f"Scorer names must be unique; got {names}. Use NAME=SPEC to rename.")
    results = {
        named.name: evaluate_scorer(
            ds, rows, named, output_dir, batch_outputs=batch_outputs, progress=progress
        )
        for named in scorers
    }
    write_outputs(results, output_dir)
    return results


def write_outputs(results: dict[str, dict], output_dir: Path) -> dict[str, Path]:
    """summary.json, summary.{txt,md,tex}, by_task.{txt,md,tex} and metrics.png."""
    output_dir = Path(output_dir)
    write_json_atomic(
        output_dir / "summary.json",
        {"methods": results, "paper": PAPER_RESULTS, "groups": EDIT_TASK_GROUPS},
    )
    paths = write_tables(output_dir / "summary", *summary_rows(results))
    paths.update(
        {
            f"task_{k}": v
            for k, v in write_tables(output_dir / "by_task", *detail_rows(results)).items()
        }
    )
    methods = list(results) + [f"paper: {n}" for n in PAPER_RESULTS]
    values = [[results[m]["mean"]["strict"][d] for d in DIMENSIONS] for m in results]
    values += [[PAPER_RESULTS[n][d] for d in DIMENSIONS] for n in PAPER_RESULTS]
    paths["png"] = bar_chart(
        output_dir / "metrics.png", methods, list(DIMENSIONS), values, "EditReward-Bench (strict)"
    )
    return paths


@dataclass(kw_only=True)
class EditRewardBenchArguments(ScorerArguments):
    """EditReward-Bench: does a scorer prefer the edit people preferred?"""

    data: str = config_field(help="save_to_disk folder, parquet file or folder of parquet files.")
    output_dir: str = config_field(
        "results/edit_reward_bench", help="Where per-method results, tables and the chart go."
    )
    batch_outputs: int = config_field(16, help="Outputs per scoring call.")
    limit: int | None = config_field(None, help="Evaluate the first N rows only.")
    progress: bool = config_field(True, help="Show progress bars (--no_progress hides them).")


def run(args: EditRewardBenchArguments) -> int:
    """Run the benchmark as ``args`` say and print the summary tables."""
    results = run_benchmark(
        args.data,
        args.build_scorers(),
        args.output_dir,
        batch_outputs=args.batch_outputs,
        limit=args.limit,
        progress=args.progress,
    )
    print("\n== EditReward-Bench: pairwise accuracy, mean over task types ==")
    print(format_table(*summary_rows(results)))
    print("\n== Per task type and group (strict) ==")
    print(format_table(*detail_rows(results)))
    print(f"\nOutputs in {args.output_dir}/ (summary.{{txt,md,tex,json}}, by_task.*, metrics.png)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the summary table and returns an exit status."""
    command = Command("edit-reward-bench", EditRewardBenchArguments, run, "Run EditReward-Bench.")
    return run_cli(PROG, __doc__.split("\n\n")[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
