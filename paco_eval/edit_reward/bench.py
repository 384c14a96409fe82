"""EditReward-Bench (EditScore release): does a judge prefer the edit people preferred?

Data: a local ``datasets`` folder (``Dataset.save_to_disk``; a ``DatasetDict`` uses its
``train`` split), a parquet file, or a folder of parquet files (a hub snapshot). Each row is
one human comparison with fields ``key`` (one id per output image), ``instruction``,
``input_image``, ``output_images`` (the preferred output first), ``task_type`` (13 types, see
:data:`EDIT_TASK_GROUPS`) and ``dimension`` in ``prompt_following`` / ``consistency`` /
``overall``. A row with more than two outputs contributes one comparison per non-preferred
output (first vs each other).

Scoring: each unique output (by its key) is scored once.

- PaCo evaluators (``paco:``, ``server:``): exactly :meth:`PacoReward.score_edit`:
  ``consistency`` with the ``edit_consistency`` template, ``prompt_following`` with
  ``edit_following``, ``overall = sqrt(consistency * prompt_following)``.
- Any other scorer (CLIP-I, pixel, DreamSim, ...): its one similarity of (input, output) is
  used for all three dimensions. Image-similarity baselines cannot read the instruction, so on
  ``prompt_following`` they measure "changed little", which is the point of reporting them.

Metrics per task type and dimension: strict (preferred score ``>`` other) and non-strict
(``>=``) pairwise accuracy; the headline numbers are unweighted means over task types (as
EditScore's ``calculate_statistics.py``), plus group means over :data:`EDIT_TASK_GROUPS`.
``paco-eval edit_reward_bench`` runs it on the shared harness
(:mod:`paco_eval.edit_reward.benchmark`); ``python -m benchmarks.edit_reward_bench`` compares
several scorers at once with the same functions.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paco_eval.errors import BenchmarkDataError
from paco_eval.harness import RowStore
from paco_reward.errors import InputError
from paco_reward.metrics import mean_over, pairwise_correct

__all__ = [
    "DIMENSIONS",
    "EDIT_TASK_GROUPS",
    "EDIT_TASK_TYPES",
    "PAPER_RESULTS",
    "compare",
    "detail_rows",
    "edit_rows",
    "edit_scores",
    "load_edit_reward_bench",
    "score_outputs",
    "summarize",
    "summary_rows",
]

logger = logging.getLogger(__name__)

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


def edit_rows(ds) -> list[dict]:
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
    store: RowStore,
    *,
    batch_outputs: int = 16,
    progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Score every unique output key not yet in ``store`` (one row per output, appended as
    scored); return ``{output key: {dimension: score}}`` (NaN for a failed score).

    Raises:
        InputError: ``batch_outputs`` < 1.
        BenchmarkDataError: a row whose keys and output images differ in number.
    """
    from tqdm.auto import tqdm

    if batch_outputs < 1:
        raise InputError(f"batch_outputs={batch_outputs} must be >= 1.")
    where: dict[str, tuple[int, int]] = {}
    for row in rows:
        for pos, key in enumerate(row["key"]):
            where.setdefault(key, (row["row"], pos))
    done = store.done_keys()
    todo = [k for k in where if k not in done]
    if len(where) > len(todo):
        logger.info("%d output(s) scored already, %d to score.", len(where) - len(todo), len(todo))
    with tqdm(total=len(todo), desc="EditReward-Bench", disable=not progress) as bar:
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
            store.append(
                [
                    {"key": key, **{d: _none(float(scores[d][j])) for d in DIMENSIONS}}
                    for j, key in enumerate(chunk)
                ]
            )
            bar.update(len(chunk))
    out = {}
    for key in where:
        row = store.get(key) or {}
        out[key] = {d: math.nan if row.get(d) is None else float(row[d]) for d in DIMENSIONS}
    return out


def _none(value: float) -> float | None:
    """JSON has no NaN: a failed score is stored as ``null``."""
    return None if math.isnan(value) else value


def compare(rows: Sequence[dict], scores: dict[str, dict[str, float]]) -> list[dict]:
    """One comparison per (preferred output, other output) of each row, with both scores on
    the row's dimension and whether the preferred one wins strictly / non-strictly (``None``
    where a score failed)."""
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
                    "scores": [_none(best), _none(other)],
                    "correct_strict": None if nan else bool(best > other),
                    "correct_non_strict": None if nan else bool(best >= other),
                }
            )
    return comparisons


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
