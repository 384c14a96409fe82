"""``paco-eval edit_reward_bench``: EditReward-Bench's stages and flags (docs/benchmarks.md).

    paco-eval edit_reward_bench judge --data EditReward-Bench --judge paco:out/paco-reward-run \\
        --output_dir out/edit_reward_bench
    paco-eval edit_reward_bench report ...   # the judge stage's flags: report.json + report.md

judge scores each unique output once (``consistency``, ``prompt_following``, ``overall``) and
appends one row per output to ``<output_dir>/judge-<judge>.jsonl``
(:func:`paco_eval.judge_bench.open_store`). report compares the preferred output with each
other one per row: strict (``>``) and non-strict (``>=``) accuracy per task type, the
unweighted mean over task types (EditScore's ``calculate_statistics.py``, the paper's
headline) and the four group means, beside the paper's row. Both modes are that one
arithmetic: no quirk of the released scoring is known to change the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from paco_eval.judge_bench import JudgeBenchArguments
from paco_eval.registry import Benchmark
from paco_reward.command_line import config_field
from paco_reward.errors import ConfigError

__all__ = ["BENCHMARK", "COLUMNS", "EditRewardConfig"]

NAME = "edit_reward_bench"
_DIMS = ("prompt_following", "consistency", "overall")
COLUMNS = [*_DIMS, *(f"{d}_non_strict" for d in _DIMS)]
# What a PaCo evaluator is asked (PacoReward.score_edit's templates).
EDIT_TEMPLATES = {"consistency": "edit_consistency", "prompt_following": "edit_following"}


@dataclass(kw_only=True)
class EditRewardConfig(JudgeBenchArguments):
    """Evaluate an editing judge on EditReward-Bench (judge, report)."""

    judge_kinds: ClassVar[tuple[str, ...]] = ("paco", "server", "clip", "pixel", "dreamsim")
    bare_judge_kinds: ClassVar[tuple[str, str]] = ("server", "paco")

    data: str = config_field(help="A datasets.save_to_disk folder, a parquet file or a folder of parquet files.")
    output_dir: str = config_field("edit_reward_bench_eval", help="Folder of the results files and the report.")
    batch_outputs: int = config_field(16, help="Outputs per scoring call.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_outputs < 1:
            raise ConfigError(f"--batch_outputs must be >= 1; got {self.batch_outputs}.")


def _load(config: EditRewardConfig) -> tuple[Any, list[dict]]:
    from paco_eval.edit_reward.bench import edit_rows, load_edit_reward_bench

    ds = load_edit_reward_bench(config.data)
    if config.limit is not None:
        ds = ds.select(range(min(config.limit, len(ds))))
    return ds, edit_rows(ds)


def _judge_id(config: EditRewardConfig, stage: str) -> dict[str, Any]:
    judge = config.judge_id(stage)
    if config.judge_spec(stage).kind in ("paco", "server"):
        judge["templates"] = dict(EDIT_TEMPLATES)
    return judge


def _store(config: EditRewardConfig, rows: list[dict], stage: str):
    from paco_eval.harness import file_fingerprint, fingerprint
    from paco_eval.judge_bench import data_files, open_store

    inputs = {
        "rows": fingerprint([[r["key"], r["instruction"], r["task_type"], r["dimension"]] for r in rows]),
        "files": file_fingerprint(data_files(config.data)),
    }
    return open_store(config, NAME, stage, _judge_id(config, stage), inputs)


def run_judge(config: EditRewardConfig) -> int:
    """Score every output of the selected rows not in the results file yet."""
    from paco_eval.edit_reward.bench import score_outputs

    ds, rows = _load(config)
    store = _store(config, rows, "judge")
    before = len(store)
    scorer = config.pair_scorer("judge", EDIT_TEMPLATES["consistency"])
    score_outputs(ds, rows, scorer, store, batch_outputs=config.batch_outputs, progress=config.progress)
    print(f"paco-eval {NAME} judge: {len(store) - before} output(s) scored, {before} already in {store.path}")
    return 0


def build_report(config: EditRewardConfig, rows: list[dict], store_rows: list[dict], judge: dict) -> Any:
    """The harness :class:`~paco_eval.harness.Report` of the scored outputs."""
    import math

    from paco_eval.edit_reward.bench import EDIT_TASK_TYPES, PAPER_RESULTS, compare, summarize
    from paco_eval.harness import Report, library_versions
    from paco_eval.judge_bench import num

    scored = {r["key"]: {d: math.nan if r.get(d) is None else float(r[d]) for d in _DIMS} for r in store_rows}
    ready = [r for r in rows if all(k in scored for k in r["key"])]  # rows whose outputs are all scored
    comparisons = compare(ready, scored)
    summary = summarize(comparisons)

    def columns_of(values: dict[str, dict[str, float]]) -> dict[str, Any]:
        out = {d: num(values["strict"][d]) for d in _DIMS}
        out.update({f"{d}_non_strict": num(values["non_strict"][d]) for d in _DIMS})
        return out

    table = columns_of(summary["mean"])
    groups = {}
    for task, dims in summary["per_task"].items():
        groups[task] = {d: num(v["strict"]) for d, v in dims.items()}
        groups[task].update({f"{d}_non_strict": num(v["non_strict"]) for d, v in dims.items()})
    groups.update({f"[{g}]": columns_of(v) for g, v in summary["groups"].items()})
    items = {
        f"row {c['row']}: {c['key'][0]} vs {c['key'][1]}": {
            "task_type": c["task_type"], "dimension": c["dimension"],
            "preferred": c["scores"][0], "other": c["scores"][1], "right": c["correct_strict"],
        }
        for c in comparisons
    }  # fmt: skip
    outputs = {k for r in rows for k in r["key"]}
    present = sorted({r["task_type"] for r in rows})
    coverage = {
        "rows_selected": len(rows),
        "rows_judged": len(ready),
        "rows_not_judged_yet": len(rows) - len(ready),
        "comparisons": len(comparisons),
        "comparisons_with_failed_scores": sum(c["correct_strict"] is None for c in comparisons),
        "outputs_selected": len(outputs),
        "outputs_scored": len(outputs & set(scored)),
        "task_types": present,
        "task_types_absent_of_the_13": [t for t in EDIT_TASK_TYPES if t not in present],
    }
    notes = [
        "Headline: strict pairwise accuracy (preferred > other), unweighted mean over task "
        "types, as EditScore's calculate_statistics.py; *_non_strict counts ties right.",
        "Image-similarity baselines give one score for all three dimensions (they cannot read "
        "the instruction).",
    ]
    protocol = {
        "benchmark": NAME,
        "judge": judge,
        "aggregation": "mean over task types of per-task accuracy; a failed score leaves its comparison out",
        "data": config.data,
        "versions": library_versions(),
    }
    paper = {f"paper: {name}": dict(values) for name, values in PAPER_RESULTS.items()}
    return Report(benchmark=NAME, mode=config.mode, columns=COLUMNS, table=table, groups=groups,
                  items=items, coverage=coverage, protocol=protocol, paper_rows=paper, notes=notes,
                  title=f"EditReward-Bench: {judge['spec']}")  # fmt: skip


def run_report(config: EditRewardConfig) -> int:
    """Write report.json and report.md from the judge stage's results file."""
    from paco_eval.judge_bench import finish_report, require_rows

    _, rows = _load(config)
    store = _store(config, rows, "report")
    require_rows(store, NAME)
    report = build_report(config, rows, store.rows(), store.header.get("judge") or _judge_id(config, "report"))
    return finish_report(report, config.output_dir, NAME)


BENCHMARK = Benchmark(
    name=NAME,
    help="EditReward-Bench: does a judge prefer the edit people preferred?",
    config_cls=EditRewardConfig,
    stages={"judge": run_judge, "report": run_report},
)
