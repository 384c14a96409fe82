"""ConsistencyRank: does a scorer rank candidates against a reference the way people do?

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

import json
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
from paco_reward.metrics import (
    RANKING_METRICS,
    TIE_RULES,
    item_ranking_metrics,
    predicted_order,
    ranking_metrics,
)

logger = logging.getLogger(__name__)

PROG = "python -m benchmarks.consistency_rank"

# Paper (arXiv 2512.04784), computed with the released evaluator: the correlations
# are its *_ref definitions.
PAPER_RESULTS: dict[str, dict[str, float]] = {
    "PaCo-Reward-7B": {
        "accuracy": 0.449,
        "kendall_tau_ref": 0.250,
        "spearman_rho_ref": 0.288,
        "top1_bottom1": 0.557,
    },
    "Qwen2.5-VL-7B": {
        "accuracy": 0.344,
        "kendall_tau_ref": 0.118,
        "spearman_rho_ref": 0.138,
        "top1_bottom1": 0.401,
    },
    "CLIP-I": {
        "accuracy": 0.394,
        "kendall_tau_ref": 0.178,
        "spearman_rho_ref": 0.206,
        "top1_bottom1": 0.475,
    },
    "DreamSim": {
        "accuracy": 0.403,
        "kendall_tau_ref": 0.184,
        "spearman_rho_ref": 0.214,
        "top1_bottom1": 0.493,
    },
}

TABLE_COLUMNS = [
    ("accuracy", "Acc"),
    ("kendall_tau", "tau"),
    ("spearman_rho", "rho"),
    ("top1_bottom1", "T1-B1"),
    ("footrule", "footrule"),
    ("kendall_tau_ref", "tau_ref"),
    ("spearman_rho_ref", "rho_ref"),
]
CHART_METRICS = [m for m in RANKING_METRICS if m != "footrule"]


@dataclass(frozen=True)
class RankItem:
    """One ConsistencyRank item: a reference, candidates, and their human order."""

    folder: str
    ref_image: str
    comp_images: tuple[str, ...]
    rank_images: tuple[str, ...]
    prompt: str | None = None
    category: str | None = None

    @property
    def key(self) -> str:
        """Identity used for resuming: folder, reference and candidates."""
        return json.dumps([self.folder, self.ref_image, list(self.comp_images)])

    @property
    def human_order(self) -> list[int]:
        """Candidate indices (into ``comp_images``), best first."""
        return [self.comp_images.index(name) for name in self.rank_images]

    def paths(self, image_dir: Path) -> tuple[Path, list[Path]]:
        folder = image_dir / self.folder
        return folder / self.ref_image, [folder / c for c in self.comp_images]


def _read_jsonl_strict(path: Path) -> list[dict]:
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise BenchmarkDataError(f"{path}:{lineno} is not valid JSON ({err}).") from None
    return records


def load_consistency_rank(
    data_dir: str | Path, category_field: str = "category", check_images: bool = True
) -> list[RankItem]:
    """Read a ConsistencyRank folder (layout in the module docstring).

    Args:
        data_dir: the dataset folder.
        category_field: field of ``prompt_data.jsonl`` holding an item's category.
        check_images: fail early if an image file is missing.

    Raises:
        BenchmarkDataError: missing files or fields, or a ``rank_images`` that is not an
            ordering of ``comp_images``.

    Example:
        >>> items = load_consistency_rank("ConsistencyRank")   # doctest: +SKIP
        >>> items[0].human_order                                 # doctest: +SKIP
        [2, 0, 3, 1]
    """
    data_dir = Path(data_dir)
    rank_file = data_dir / "consistency_full_rank.jsonl"
    if not rank_file.is_file():
        raise BenchmarkDataError(
            f"No {rank_file}: --data-dir must be a ConsistencyRank folder with "
            "consistency_full_rank.jsonl, prompt_data.jsonl and images/."
        )
    prompts: dict[str, dict] = {}
    prompt_file = data_dir / "prompt_data.jsonl"
    if prompt_file.is_file():
        for record in _read_jsonl_strict(prompt_file):
            if "idx" in record:
                prompts[str(record["idx"])] = record
    else:
        logger.info("%s not found: items have no prompt or category.", prompt_file)

    items: list[RankItem] = []
    seen: set[str] = set()
    for k, record in enumerate(_read_jsonl_strict(rank_file)):
        where = f"{rank_file} item {k}"
        ref = record.get("ref_image") or record.get("ref_img")
        comps = record.get("comp_images") or record.get("comparison_images")
        ranks = record.get("rank_images")
        if "folder" not in record or not ref or not comps or not ranks:
            raise BenchmarkDataError(
                f"{where}: needs 'folder', 'ref_image' (or 'ref_img'), 'comp_images' (or "
                f"'comparison_images') and 'rank_images'; got keys {sorted(record)}."
            )
        if sorted(ranks) != sorted(comps) or len(set(comps)) != len(comps):
            raise BenchmarkDataError(
                f"{where}: rank_images {ranks} must list each of comp_images {comps} exactly once."
            )
        if len(comps) < 2:
            raise BenchmarkDataError(f"{where}: needs at least 2 candidates; got {comps}.")
        folder = str(record["folder"])
        meta = prompts.get(folder, {})
        prompt = meta.get("prompt") or meta.get("caption")
        category = meta.get(category_field)
        item = RankItem(
            folder=folder,
            ref_image=str(ref),
            comp_images=tuple(str(c) for c in comps),
            rank_images=tuple(str(r) for r in ranks),
            prompt=str(prompt) if prompt else None,
            category=str(category) if category not in (None, "") else None,
        )
        if item.key in seen:
            logger.warning("%s duplicates an earlier item; skipped.", where)
            continue
        seen.add(item.key)
        if check_images:
            ref_path, cand_paths = item.paths(data_dir / "images")
            for path in [ref_path, *cand_paths]:
                if not path.is_file():
                    raise BenchmarkDataError(f"{where}: image file {path} does not exist.")
        items.append(item)
    if not items:
        raise BenchmarkDataError(f"{rank_file} holds no items.")
    return items


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
    """Score every item not yet in ``results_path`` and append its result line there.

    Items are scored in batches of ``items_per_batch`` (one ``score_pairs`` call each);
    each finished item is appended atomically, so an interrupted run resumes where it
    stopped. Returns the result records of ``items`` in their order.
    """
    from tqdm.auto import tqdm

    if items_per_batch < 1:
        raise InputError(f"items_per_batch={items_per_batch} must be >= 1.")
    done = {r["key"]: r for r in read_jsonl(results_path) if "key" in r}
    todo = [item for item in items if item.key not in done]
    if done:
        logger.info("%s: %d item(s) already scored, %d to go.", results_path, len(done), len(todo))
    with tqdm(total=len(todo), desc=results_path.parent.name, disable=not progress) as bar:
        for start in range(0, len(todo), items_per_batch):
            chunk = todo[start : start + items_per_batch]
            pairs, spans = [], []
            for item in chunk:
                ref, cands = item.paths(image_dir)
                spans.append((len(pairs), len(pairs) + len(cands)))
                pairs += [(str(ref), str(c), item.prompt) for c in cands]
            scores = np.asarray(scorer.score_pairs(pairs), dtype=np.float64)
            if scores.shape != (len(pairs),):
                raise InputError(
                    f"{type(scorer).__name__}.score_pairs returned shape {scores.shape} for "
                    f"{len(pairs)} pairs; a scorer must return one score per pair."
                )
            for item, (a, b) in zip(chunk, spans):
                record = _item_record(item, scores[a:b], ties)
                append_jsonl(results_path, record)
                done[item.key] = record
            bar.update(len(chunk))
    return [done[item.key] for item in items]


def _item_record(item: RankItem, scores: np.ndarray, ties: str) -> dict:
    finite = bool(np.isfinite(scores).all())
    metrics = item_ranking_metrics(scores, item.human_order, ties) if finite else None
    order = predicted_order(scores, ties) if finite else None
    if not finite:
        logger.warning(
            "Item %s has non-finite scores %s; left out of the metrics.", item.folder, scores
        )
    return {
        "key": item.key,
        "folder": item.folder,
        "ref_image": item.ref_image,
        "comp_images": list(item.comp_images),
        "rank_images": list(item.rank_images),
        "category": item.category,
        "scores": [None if math.isnan(s) else float(s) for s in scores],
        "pred_rank": [item.comp_images[i] for i in order] if order else None,
        "metrics": metrics,
    }


def summarize(records: Sequence[dict], ties: str = "first") -> dict:
    """Metrics over ``records`` (from :func:`evaluate_scorer`), recomputed from the stored
    scores; ``by_category`` when items have categories."""

    def metrics_of(recs: Sequence[dict]) -> dict:
        scores = [[np.nan if s is None else s for s in r["scores"]] for r in recs]
        orders = [[r["comp_images"].index(name) for name in r["rank_images"]] for r in recs]
        return ranking_metrics(scores, orders, ties)

    summary = {"overall": metrics_of(records)}
    categories = sorted({r["category"] for r in records if r.get("category")})
    if categories:
        summary["by_category"] = {
            c: metrics_of([r for r in records if r.get("category") == c]) for c in categories
        }
    return summary


def summary_rows(results: dict[str, dict], with_paper: bool = True) -> tuple[list[str], list[list]]:
    """Header and rows of the summary table: our methods, then the paper's numbers.

    ``tied`` counts the items whose scores tie: their order comes from the ``ties`` rule,
    and the released evaluator's order for them depends on the numpy version."""
    header = ["method", "n", "tied"] + [label for _, label in TABLE_COLUMNS]
    rows = [
        [name, s["overall"]["n_items"], s["overall"]["n_tied"]]
        + [s["overall"][key] for key, _ in TABLE_COLUMNS]
        for name, s in results.items()
    ]
    if with_paper:
        for name, paper in PAPER_RESULTS.items():
            rows.append(
                [f"paper: {name}", None, None] + [paper.get(key) for key, _ in TABLE_COLUMNS]
            )
    return header, rows


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
