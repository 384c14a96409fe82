"""``paco-eval consistency_rank``: ConsistencyRank's stages and flags (docs/benchmarks.md).

    paco-eval consistency_rank judge --data ConsistencyRank --judge paco:out/paco-reward-run \\
        --output_dir out/consistency_rank
    paco-eval consistency_rank judge ... --judge clip:openai/clip-vit-large-patch14   # CLIP-I
    paco-eval consistency_rank report ...   # the judge stage's flags: report.json + report.md

judge appends one row per item (its candidates' scores) to
``<output_dir>/judge-<judge>.jsonl`` (:func:`paco_eval.judge_bench.open_store`). report ranks
the scores under ``--mode``'s tie rule (``default``: the lower candidate index first;
``reference``: the released evaluator's ``np.argsort(scores)[::-1]`` under numpy 1.x) and
writes every metric of :func:`paco_reward.metrics.ranking_metrics`, per category and per item,
beside the paper's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from paco_eval.judge_bench import JudgeBenchArguments
from paco_eval.registry import Benchmark
from paco_reward.command_line import config_field
from paco_reward.errors import ConfigError

__all__ = ["BENCHMARK", "COLUMNS", "ConsistencyRankConfig"]

NAME = "consistency_rank"
COLUMNS = ["accuracy", "kendall_tau", "spearman_rho", "top1_bottom1", "footrule",
           "kendall_tau_ref", "spearman_rho_ref"]  # fmt: skip
# The tie rule of each mode (paco_reward.metrics.TIE_RULES).
TIES = {"default": "first", "reference": "last"}


@dataclass(kw_only=True)
class ConsistencyRankConfig(JudgeBenchArguments):
    """Evaluate a consistency judge on ConsistencyRank (judge, report)."""

    judge_kinds: ClassVar[tuple[str, ...]] = ("paco", "server", "clip", "pixel", "dreamsim")
    bare_judge_kinds: ClassVar[tuple[str, str]] = ("server", "paco")

    data: str = config_field(
        help="The ConsistencyRank folder (images/, prompt_data.jsonl, consistency_full_rank.jsonl)."
    )
    output_dir: str = config_field("consistency_rank_eval", help="Folder of the results files and the report.")
    template: str = config_field("rank", help="paco: and server: judges: the template pairs are scored with.")
    items_per_batch: int = config_field(8, help="Items per score_pairs call.")
    category_field: str = config_field("category", help="prompt_data.jsonl's key of an item's category.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.items_per_batch < 1:
            raise ConfigError(f"--items_per_batch must be >= 1; got {self.items_per_batch}.")

    @property
    def ties(self) -> str:
        return TIES[self.mode]


def _items(config: ConsistencyRankConfig) -> list:
    from paco_eval.consistency_rank.bench import load_consistency_rank

    items = load_consistency_rank(config.data, category_field=config.category_field)
    return items[: config.limit] if config.limit is not None else items


def _judge_id(config: ConsistencyRankConfig, stage: str) -> dict[str, Any]:
    judge = config.judge_id(stage)
    if config.judge_spec(stage).kind in ("paco", "server"):  # baselines take no template
        judge["template"] = config.template
    return judge


def _store(config: ConsistencyRankConfig, items: list, stage: str):
    from paco_eval.harness import file_fingerprint, fingerprint
    from paco_eval.judge_bench import open_store

    data = Path(config.data)
    images = [p for item in items for p in (lambda r, c: [r, *c])(*item.paths(data / "images"))]
    inputs = {
        "items": fingerprint([[it.key, list(it.rank_images), it.prompt] for it in items]),
        "files": file_fingerprint(images + [data / "consistency_full_rank.jsonl", data / "prompt_data.jsonl"]),
    }
    return open_store(config, NAME, stage, _judge_id(config, stage), inputs)


def run_judge(config: ConsistencyRankConfig) -> int:
    """Score every selected item not in the results file yet."""
    from paco_eval.consistency_rank.bench import score_items

    items = _items(config)
    store = _store(config, items, "judge")
    before = len(store)
    scorer = config.pair_scorer("judge", config.template)
    score_items(items, scorer, store, Path(config.data) / "images",
                items_per_batch=config.items_per_batch, progress=config.progress)  # fmt: skip
    print(f"paco-eval {NAME} judge: {len(store) - before} judged, {before} already in {store.path}")
    return 0


def build_report(config: ConsistencyRankConfig, items: list, records: list[dict], judge: dict) -> Any:
    """The harness :class:`~paco_eval.harness.Report` of the scored ``records``."""
    import numpy as np

    from paco_eval.consistency_rank.bench import PAPER_RESULTS, summarize
    from paco_eval.harness import Report, library_versions
    from paco_eval.judge_bench import num
    from paco_reward.metrics import item_ranking_metrics, predicted_order

    ties = config.ties
    summary = summarize(records, ties)
    overall = summary["overall"]
    table = {c: num(overall[c]) for c in COLUMNS}
    groups = {cat: {c: num(m[c]) for c in COLUMNS} for cat, m in summary.get("by_category", {}).items()}
    rows = {}
    for r in records:
        scores = np.asarray([np.nan if s is None else s for s in r["scores"]], dtype=np.float64)
        human = [r["comp_images"].index(name) for name in r["rank_images"]]
        finite = bool(np.isfinite(scores).all())
        metrics = item_ranking_metrics(scores, human, ties) if finite else {}
        rows[f"{r['folder']}/{r['ref_image']}"] = {
            "category": r.get("category"),
            "pred_rank": " > ".join(r["comp_images"][i] for i in predicted_order(scores, ties)) if finite else None,
            **{c: num(metrics.get(c)) for c in ("accuracy", "kendall_tau_ref", "top1_bottom1")},
        }
    judged = {r["key"] for r in records}
    coverage = {
        "items_selected": len(items),
        "items_judged": len(judged),
        "items_not_judged_yet": len({it.key for it in items} - judged),
        "items_averaged": overall["n_items"],
        "items_with_failed_scores": overall["n_skipped"],
        "items_with_tied_scores": overall["n_tied"],
    }
    notes = [
        "The paper's correlations are the released evaluator's definitions: kendall_tau_ref and "
        "spearman_rho_ref (on the orderings); kendall_tau and spearman_rho are on rank vectors.",
        f"Tied scores ordered by the {ties!r} rule ({'the released evaluator under numpy 1.x' if ties == 'last' else 'lower candidate index first'}); "
        f"{overall['n_tied']} item(s) tie.",
    ]
    protocol = {
        "benchmark": NAME,
        "judge": judge,
        "ties": ties,
        "metrics": "paco_reward.metrics.ranking_metrics, mean over items",
        "data": config.data,
        "versions": library_versions(),
    }
    paper = {f"paper: {name}": dict(values) for name, values in PAPER_RESULTS.items()}
    return Report(benchmark=NAME, mode=config.mode, columns=COLUMNS, table=table, groups=groups,
                  items=rows, coverage=coverage, protocol=protocol, paper_rows=paper, notes=notes,
                  title=f"ConsistencyRank: {judge['spec']}")  # fmt: skip


def run_report(config: ConsistencyRankConfig) -> int:
    """Write report.json and report.md from the judge stage's results file."""
    from paco_eval.judge_bench import finish_report, require_rows

    items = _items(config)
    store = _store(config, items, "report")
    require_rows(store, NAME)
    keys = {it.key for it in items}
    records = [r for r in store.rows() if r["key"] in keys]
    report = build_report(config, items, records, store.header.get("judge") or _judge_id(config, "report"))
    return finish_report(report, config.output_dir, NAME)


BENCHMARK = Benchmark(
    name=NAME,
    help="ConsistencyRank: does a judge rank candidates against a reference as people do?",
    config_cls=ConsistencyRankConfig,
    stages={"judge": run_judge, "report": run_report},
)
