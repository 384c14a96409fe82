"""EditReward-Bench (EditScore release): does a scorer prefer the edit people preferred?

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
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    BenchmarkDataError,
    NamedScorer,
    ScorerArguments,
    append_jsonl,
    bar_chart,
    check_run_config,
    format_table,
    read_jsonl,
    slug,
    write_json_atomic,
    write_tables,
)
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError, InputError
from paco_reward.metrics import mean_over, pairwise_correct

logger = logging.getLogger(__name__)

PROG = "python -m benchmarks.edit_reward_bench"

DIMENSIONS = ("prompt_following", "consistency", "overall")
DIMENSION_LABELS = {"prompt_following": "PF", "consistency": "SC", "overall": "O"}

# EditScore's grouping of its 13 task types (calculate_statistics.py).
EDIT_TASK_GROUPS: dict[str, tuple[str, ...]] = {
    "object": ("subject-add", "subject-remove", "subject-replace"),
    "appearance": ("color_alter", "material_alter", "style_change", "tone_transfer"),
    "scene": ("background_change", "extract"),
    "advanced": ("ps_human", "text_change", "motion_change", "compose"),
}
EDIT_TASK_TYPES: tuple[str, ...] = tuple(t for group in EDIT_TASK_GROUPS.values() for t in group)

# Paper (arXiv 2512.04784): PaCo-Reward-7B, mean over task types, strict accuracy.
PAPER_RESULTS: dict[str, dict[str, float]] = {
    "PaCo-Reward-7B": {"prompt_following": 0.777, "consistency": 0.709, "overall": 0.751},
}


def load_edit_reward_bench(path: str | Path):
    """Open EditReward-Bench from a ``save_to_disk`` folder, a parquet file or a folder of
    parquet files, and check its columns.

    Raises:
        BenchmarkDataError: nothing loadable at ``path`` or required columns missing.

    Example:
        >>> ds = load_edit_reward_bench("EditReward-Bench")   # doctest: +SKIP
    """
    import datasets

    path = Path(path)
    if path.is_dir() and (
        (path / "dataset_info.json").exists()
        or (path / "state.json").exists()
        or (path / "dataset_dict.json").exists()
    ):
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            split = "train" if "train" in ds else next(iter(ds))
            ds = ds[split]
    else:
        files = (
            [path] if path.is_file() else sorted(path.rglob("*.parquet")) if path.is_dir() else []
        )
        if not files:
            raise BenchmarkDataError(
                f"No dataset at {str(path)!r}: pass a datasets.save_to_disk folder, a parquet "
                "file, or a folder containing parquet files."
            )
        ds = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    required = {"key", "instruction", "input_image", "output_images", "task_type", "dimension"}
    missing = required - set(ds.column_names)
    if missing:
        raise BenchmarkDataError(
            f"{path}: missing column(s) {sorted(missing)}; EditReward-Bench rows need {sorted(required)}."
        )
    return ds


def _to_image(value: Any, name: str):
    from paco_reward.images import load_image

    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path")
    return load_image(value, name)


def _rows(ds) -> list[dict]:
    """Row metadata without images, validated."""
    meta = ds.select_columns(["key", "instruction", "task_type", "dimension"])
    rows = []
    for i, row in enumerate(meta):
        keys = [str(k) for k in row["key"]]
        if len(keys) < 2:
            raise BenchmarkDataError(f"row {i}: 'key' must name at least 2 outputs; got {keys}.")
        if row["dimension"] not in DIMENSIONS:
            raise BenchmarkDataError(
                f"row {i}: dimension {row['dimension']!r} is not one of {list(DIMENSIONS)}."
            )
        rows.append({"row": i, **row, "key": keys})
    return rows


def edit_scores(scorer: Any, triples: Sequence[tuple]) -> dict[str, np.ndarray]:
    """Per triple ``(source, edited, instruction)``: ``consistency``, ``prompt_following``
    and ``overall`` scores (see the module docstring for what non-PaCo scorers give)."""
    if hasattr(scorer, "score_edit_batch"):
        out = scorer.score_edit_batch(triples)
        return {d: np.asarray(out[d], dtype=np.float64) for d in DIMENSIONS}
    s = np.asarray(scorer.score_pairs(list(triples)), dtype=np.float64)
    return {d: s for d in DIMENSIONS}


def score_outputs(
    ds,
    rows: Sequence[dict],
    scorer: Any,
    cache_path: Path,
    *,
    batch_outputs: int = 16,
    progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Score every unique output key once (cached in ``cache_path``, appended atomically);
    return ``{output key: {dimension: score}}`` (NaN for a failed score)."""
    from tqdm.auto import tqdm

    if batch_outputs < 1:
        raise InputError(f"batch_outputs={batch_outputs} must be >= 1.")
    cache = {
        r["key"]: {d: math.nan if r.get(d) is None else float(r[d]) for d in DIMENSIONS}
        for r in read_jsonl(cache_path)
        if "key" in r
    }
    where: dict[str, tuple[int, int]] = {}
    for row in rows:
        for pos, key in enumerate(row["key"]):
            where.setdefault(key, (row["row"], pos))
    todo = [k for k in where if k not in cache]
    if len(where) > len(todo):
        logger.info(
            "%s: %d output(s) cached, %d to score.", cache_path, len(where) - len(todo), len(todo)
        )
    with tqdm(total=len(todo), desc=cache_path.parent.name, disable=not progress) as bar:
        for start in range(0, len(todo), batch_outputs):
            chunk = todo[start : start + batch_outputs]
            triples = []
            for key in chunk:
                r, pos = where[key]
                record = ds[r]
                outputs = record["output_images"]
                if len(outputs) != len(record["key"]):
                    raise BenchmarkDataError(
                        f"row {r}: {len(record['key'])} keys but {len(outputs)} output_images."
                    )
                triples.append(
                    (
                        _to_image(record["input_image"], f"row {r} input_image"),
                        _to_image(outputs[pos], f"row {r} output_images[{pos}]"),
                        record["instruction"],
                    )
                )
            scores = edit_scores(scorer, triples)
            for j, key in enumerate(chunk):
                values = {d: float(scores[d][j]) for d in DIMENSIONS}
                cache[key] = values
                append_jsonl(
                    cache_path,
                    {"key": key, **{d: None if math.isnan(v) else v for d, v in values.items()}},
                )
            bar.update(len(chunk))
    return cache


def summarize(comparisons: Sequence[dict]) -> dict:
    """Accuracies from comparison records (``task_type``, ``dimension``, ``scores``):
    ``per_task[task][dimension] = {"strict", "non_strict", "n"}``, ``mean`` (unweighted
    over task types) and ``groups`` (per :data:`EDIT_TASK_GROUPS`), both per dimension and
    strictness."""
    per_task: dict[str, dict[str, dict]] = {}
    tasks = sorted({c["task_type"] for c in comparisons})
    unknown = [t for t in tasks if t not in EDIT_TASK_TYPES]
    if unknown:
        logger.warning(
            "Task types %s are not in EditScore's 13; they count in means, not groups.", unknown
        )
    for task in tasks:
        per_task[task] = {}
        for dim in DIMENSIONS:
            recs = [c for c in comparisons if c["task_type"] == task and c["dimension"] == dim]
            if not recs:
                continue
            preferred = [np.nan if c["scores"][0] is None else c["scores"][0] for c in recs]
            other = [np.nan if c["scores"][1] is None else c["scores"][1] for c in recs]
            entry = {"n": len(recs)}
            for label, strict in (("strict", True), ("non_strict", False)):
                correct = pairwise_correct(preferred, other, strict)
                valid = ~np.isnan(correct)
                entry[label] = float(correct[valid].mean()) if valid.any() else math.nan
            entry["n_nan"] = int((~valid).sum())
            per_task[task][dim] = entry
    mean: dict[str, dict[str, float]] = {}
    groups: dict[str, dict[str, dict[str, float]]] = {g: {} for g in EDIT_TASK_GROUPS}
    for label in ("strict", "non_strict"):
        mean[label] = {}
        for dim in DIMENSIONS:
            by_task = {t: v[dim][label] for t, v in per_task.items() if dim in v}
            mean[label][dim] = mean_over(by_task, list(by_task))
            for group, members in EDIT_TASK_GROUPS.items():
                groups[group].setdefault(label, {})[dim] = mean_over(by_task, members)
    return {"per_task": per_task, "mean": mean, "groups": groups, "n_comparisons": len(comparisons)}


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
    scores = score_outputs(
        ds,
        rows,
        named.scorer,
        method_dir / "scores.jsonl",
        batch_outputs=batch_outputs,
        progress=progress,
    )
    comparisons = []
    for row in rows:
        dim = row["dimension"]
        best = scores[row["key"][0]][dim]
        for other_key in row["key"][1:]:
            other = scores[other_key][dim]
            nan = math.isnan(best) or math.isnan(other)
            comparisons.append(
                {
                    "row": row["row"],
                    "key": [row["key"][0], other_key],
                    "task_type": row["task_type"],
                    "dimension": dim,
                    "scores": [
                        None if math.isnan(best) else best,
                        None if math.isnan(other) else other,
                    ],
                    "correct_strict": None if nan else bool(best > other),
                    "correct_non_strict": None if nan else bool(best >= other),
                }
            )
    results_path = method_dir / "results.jsonl"
    tmp = results_path.with_name("results.jsonl.tmp")
    tmp.unlink(missing_ok=True)
    for c in comparisons:
        append_jsonl(tmp, c)
    tmp.replace(results_path)
    return summarize(comparisons)


def summary_rows(results: dict[str, dict]) -> tuple[list[str], list[list]]:
    """Headline table: strict and non-strict mean accuracy per dimension, then the paper."""
    header = ["method", "n"]
    header += [f"{DIMENSION_LABELS[d]} (>)" for d in DIMENSIONS]
    header += [f"{DIMENSION_LABELS[d]} (>=)" for d in DIMENSIONS]
    rows = []
    for name, s in results.items():
        rows.append(
            [name, s["n_comparisons"]]
            + [s["mean"]["strict"][d] for d in DIMENSIONS]
            + [s["mean"]["non_strict"][d] for d in DIMENSIONS]
        )
    for name, paper in PAPER_RESULTS.items():
        rows.append([f"paper: {name}", None] + [paper[d] for d in DIMENSIONS] + [None] * 3)
    return header, rows


def detail_rows(results: dict[str, dict]) -> tuple[list[str], list[list]]:
    """Per method: each task type and each group, strict accuracy per dimension."""
    header = ["method", "task / group"] + [f"{DIMENSION_LABELS[d]} (>)" for d in DIMENSIONS]
    rows = []
    for name, s in results.items():
        for task, dims in s["per_task"].items():
            rows.append([name, task] + [dims.get(d, {}).get("strict") for d in DIMENSIONS])
        for group, vals in s["groups"].items():
            rows.append([name, f"[{group}]"] + [vals["strict"][d] for d in DIMENSIONS])
        rows.append([name, "[mean]"] + [s["mean"]["strict"][d] for d in DIMENSIONS])
    return header, rows


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
    rows = _rows(ds)
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
