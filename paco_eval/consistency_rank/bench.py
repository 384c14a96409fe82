"""ConsistencyRank: does a judge rank candidates against a reference the way people do?

Dataset layout (the official release)::

    <data>/images/<folder>/<gen>_<pos>.png
    <data>/prompt_data.jsonl            {"idx": <folder>, "prompt": ..., ["category": ...]}
    <data>/consistency_full_rank.jsonl  {"folder", "ref_image", "comp_images", "rank_images"}

(``ref_img`` / ``comparison_images`` are accepted for ``ref_image`` / ``comp_images``.)
Every candidate is scored as the pair (reference, candidate); candidates are ranked by score
and compared with ``rank_images`` using :func:`paco_reward.metrics.ranking_metrics`
(definitions and tie rule there). ``paco-eval consistency_rank`` runs it on the shared harness
(:mod:`paco_eval.consistency_rank.benchmark`); ``python -m benchmarks.consistency_rank``
compares several scorers at once with the same functions.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from paco_eval.errors import BenchmarkDataError
from paco_eval.harness import RowStore
from paco_reward.errors import InputError
from paco_reward.metrics import (
    RANKING_METRICS,
    item_ranking_metrics,
    predicted_order,
    ranking_metrics,
)

__all__ = [
    "CHART_METRICS",
    "PAPER_RESULTS",
    "TABLE_COLUMNS",
    "RankItem",
    "load_consistency_rank",
    "score_items",
    "summarize",
    "summary_rows",
]

logger = logging.getLogger(__name__)


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


def score_items(
    items: Sequence[RankItem],
    scorer: Any,
    store: RowStore,
    image_dir: Path,
    *,
    items_per_batch: int = 8,
    ties: str = "first",
    progress: bool = True,
) -> list[dict]:
    """Score every item not yet in ``store`` and append its row there.

    Items are scored in batches of ``items_per_batch`` (one ``score_pairs`` call each);
    each finished item is appended on its own, so an interrupted run resumes where it
    stopped. Returns the rows of ``items`` in their order.

    Raises:
        InputError: ``items_per_batch`` < 1, or a scorer returning the wrong number of scores.
    """
    from tqdm.auto import tqdm

    if items_per_batch < 1:
        raise InputError(f"items_per_batch={items_per_batch} must be >= 1.")
    done = store.done_keys()
    todo = [item for item in items if item.key not in done]
    if done:
        logger.info("%d item(s) already scored, %d to go.", len(done), len(todo))
    with tqdm(total=len(todo), desc="ConsistencyRank", disable=not progress) as bar:
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
                store.append(item_record(item, scores[a:b], ties))
            bar.update(len(chunk))
    return [row for row in (store.get(item.key) for item in items) if row is not None]


def item_record(item: RankItem, scores: np.ndarray, ties: str) -> dict:
    """The row of one item: its scores (``None`` for NaN), predicted order and metrics."""
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


