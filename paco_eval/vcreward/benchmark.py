"""``paco-eval vcreward``: VCReward-Bench's stages and flags (docs/gedit-bench.md).

    paco-eval vcreward judge --data /data/VCReward-Bench --judge paco:out/paco-reward-run \\
        --output_dir out/vcreward
    paco-eval vcreward judge --data /data/VCReward-Bench --output_dir out/vcreward \\
        --judge chat:http://127.0.0.1:8000/v1@PVC-Judge
    paco-eval vcreward report ...          # the judge stage's flags: report.json + report.md

judge appends one row per pair to ``<output_dir>/judge-<judge>.jsonl`` (the harness's
:class:`~paco_eval.harness.ResultsStore`: resumable, refused when it was written for other
pairs, images, judge or ``--swap``). report scores those rows under ``--mode``: ``default``
(strict accuracy, accuracy over answered pairs, coverage, per task and by the position the
experts chose) or ``reference`` (the released convention ``--reference`` names), and says what
the other conventions give on the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from paco_eval.judge_bench import JudgeBenchArguments
from paco_eval.registry import Benchmark
from paco_reward.command_line import config_field
from paco_reward.errors import InputError

__all__ = ["BENCHMARK", "VCRewardConfig"]

DEFAULT_COLUMNS = ["accuracy_strict", "accuracy_answered", "coverage", "pairs"]
REFERENCE_COLUMNS = ["accuracy", "correct", "total"]


@dataclass(kw_only=True)
class VCRewardConfig(JudgeBenchArguments):
    """Evaluate a consistency judge on VCReward-Bench (judge, report)."""

    judge_kinds: ClassVar[tuple[str, ...]] = ("chat", "paco", "server")

    data: str = config_field(
        help="The benchmark: a parquet file or folder (the hub's), or a folder with "
        "metadata.jsonl and the images (the pre-release layout)."
    )
    output_dir: str = config_field("vcreward_eval", help="Folder of the results files and the report.")
    tasks: list[str] = config_field(list, help="Tasks to keep (repeatable; default all present).")
    swap: bool = config_field(
        False, help="Also judge each pair with the edits swapped; a pair counts the mean."
    )
    template: str = config_field(
        "edit_consistency", help="paco: and server: judges: the template each edit is scored with."
    )
    mode: Literal["default", "reference"] = config_field(
        "default",
        help="default (ties, failures and unparsed answers wrong in accuracy_strict) or "
        "reference (the released convention --reference names).",
    )
    reference: Literal["autopipeline", "local"] = config_field(
        "autopipeline",
        help="reference mode: GEditBench_v2@82bc00e's API pipeline (ties and failures dropped) "
        "or its local path (raw string compare).",
    )

    @property
    def convention(self) -> str:
        """:func:`paco_eval.vcreward.bench.accuracy`'s name of the mode."""
        from paco_eval.vcreward.bench import AUTOPIPELINE, LOCAL

        if self.mode == "default":
            return "default"
        return AUTOPIPELINE if self.reference == "autopipeline" else LOCAL


def _pairs(config: VCRewardConfig) -> list:
    from paco_eval.vcreward.bench import load_pairs

    pairs = load_pairs(config.data, tasks=config.tasks or None)
    return pairs[: config.limit] if config.limit is not None else pairs


def _data_files(data: str) -> list[Path]:
    path = Path(data)
    if path.is_dir() and (path / "metadata.jsonl").is_file():
        return [path / "metadata.jsonl"]
    return sorted(path.glob("**/*.parquet")) if path.is_dir() else [path]


def _store(config: VCRewardConfig, pairs: list, stage: str):
    """The judge's results file, refused when it was written for other inputs."""
    from paco_eval.harness import ResultsStore, file_fingerprint, fingerprint
    from paco_eval.vcreward.prompt import prompt_sha256

    spec = config.judge_spec(stage)
    judge = config.judge_id(stage)
    if spec.kind == "chat":
        judge["prompt_sha256"] = prompt_sha256()
    else:
        judge["template"] = config.template
    images = [x for p in pairs for x in (p.source, *p.edits) if isinstance(x, Path)]
    inputs = {
        "benchmark": "vcreward",
        "pairs": fingerprint([[p.key, p.task, p.instruction, p.winner] for p in pairs]),
        "files": file_fingerprint(_data_files(config.data) + images),
        "judge": judge,
        "swap": config.swap,
    }
    header = {"benchmark": "vcreward", "judge": judge, "swap": config.swap}
    return ResultsStore(Path(config.output_dir) / f"judge-{spec.slug()}.jsonl",
                        fingerprint=fingerprint(inputs), header=header)  # fmt: skip


def _judge(config: VCRewardConfig, stage: str) -> Any:
    from paco_eval.vcreward.bench import ChatPairJudge, PointwiseJudge

    spec = config.judge_spec(stage)
    if spec.kind == "chat":
        return ChatPairJudge(config.chat_judge(stage))
    return PointwiseJudge(config.reward(stage), spec.text(), config.template)


def run_judge(config: VCRewardConfig) -> int:
    """Judge every selected pair not in the results file yet."""
    from paco_eval.vcreward.bench import judge_pairs

    pairs = _pairs(config)
    store = _store(config, pairs, "judge")
    counts = judge_pairs(pairs, _judge(config, "judge"), store, swap=config.swap)
    print(f"paco-eval vcreward judge: {counts['judged']} judged, {counts['skipped']} already in "
          f"{store.path}")  # fmt: skip
    return 0


def _num(value: Any) -> float | int | None:
    """A table value: ``None`` for NaN (nothing to count), never a silent 0."""
    if value is None or value != value:
        return None
    return value


def build_report(config: VCRewardConfig, pairs: list, records: list[dict], judge: dict) -> Any:
    """The harness :class:`~paco_eval.harness.Report` of the judged ``records``."""
    from paco_eval.harness import Report, library_versions
    from paco_eval.vcreward.bench import AUTOPIPELINE, CONVENTIONS, LOCAL, TASKS, accuracy
    from paco_eval.vcreward.bench import normalize_winner as norm

    results = {c: accuracy(records, c) for c in CONVENTIONS}
    chosen = results[config.convention]
    if config.mode == "default":
        columns = [*DEFAULT_COLUMNS, "task_macro_strict"]
        table = {c: _num(chosen["overall"][c]) for c in DEFAULT_COLUMNS}
        table["task_macro_strict"] = _num(chosen["task_macro_strict"])
        groups = {t: {c: _num(v[c]) for c in DEFAULT_COLUMNS} for t, v in chosen["tasks"].items()}
        for position, summary in chosen["by_gt_winner"].items():  # position bias shows here
            groups[f"experts chose Image {position}"] = {c: _num(summary[c]) for c in DEFAULT_COLUMNS}
    else:
        columns = REFERENCE_COLUMNS
        table = {c: _num(chosen["overall"][c]) for c in REFERENCE_COLUMNS}
        groups = {t: {c: _num(v[c]) for c in REFERENCE_COLUMNS} for t, v in chosen["tasks"].items()}
    judged = {r["key"] for r in records}
    present = sorted({p.task for p in pairs})
    coverage = {
        "pairs_selected": len(pairs),
        "pairs_judged": len(judged),
        "pairs_not_judged_yet": len({p.key for p in pairs} - judged),
        "answered": _num(results["default"]["overall"]["answered"]),
        "tasks": present,
        "tasks_absent_of_the_21": [t for t in TASKS if t not in present],
        "autopipeline_dropped": results[AUTOPIPELINE]["dropped"],
        "local_skipped": results[LOCAL]["skipped"],
    }
    items = {}
    for r in records:
        row = {"task": r["task"], "experts": r["gt_winner"], "winner": r["winner"]}
        if config.swap:
            row["winner_swapped"] = r.get("winner_swapped")
        row["right"] = norm(r["winner"]) == norm(r["gt_winner"])
        items[r["key"]] = row
    d = results["default"]["overall"]
    notes = [
        f"On the same answers: default accuracy_strict {_fmt(d['accuracy_strict'])} "
        f"(answered {_fmt(d['accuracy_answered'])}, coverage {_fmt(d['coverage'])}); "
        f"{AUTOPIPELINE} {_fmt(results[AUTOPIPELINE]['overall']['accuracy'])}; "
        f"{LOCAL} {_fmt(results[LOCAL]['overall']['accuracy'])}.",
        "Overall figures are micro over pairs, as the released calc_vc_reward computes them.",
    ]
    if config.swap:
        notes.append("--swap: each pair judged in both orders; the default counts the mean, the "
                     "released conventions the first order only.")  # fmt: skip
    proto = {
        "benchmark": "vcreward",
        "reference_code": "ZhangqiJiang07/GEditBench_v2@82bc00e",
        "convention": config.convention,
        "judge": judge,
        "swap": config.swap,
        "data": config.data,
        "versions": library_versions(),
    }
    return Report(benchmark="vcreward", mode=config.mode, columns=columns, table=table,
                  groups=groups, items=items, coverage=coverage, protocol=proto, notes=notes,
                  title=f"VCReward-Bench: {judge['spec']}")  # fmt: skip


def _fmt(value: Any) -> str:
    return "—" if value is None or value != value else f"{value:.4f}"


def run_report(config: VCRewardConfig) -> int:
    """Write report.json and report.md from the judge stage's results file."""
    from paco_eval.harness import write_report

    pairs = _pairs(config)
    store = _store(config, pairs, "report")
    if not len(store):
        raise InputError(f"no results in {store.path}: run `paco-eval vcreward judge` with the "
                         "same flags first.")  # fmt: skip
    judge = store.header.get("judge") or config.judge_id("report")
    report = build_report(config, pairs, store.rows(), judge)
    json_path, md_path = write_report(report, config.output_dir)
    print(f"paco-eval vcreward report: {md_path} and {json_path}")
    for column in report.columns:
        print(f"  {column}: {_fmt(report.table[column])}")
    return 0


BENCHMARK = Benchmark(
    name="vcreward",
    help="VCReward-Bench: a consistency judge's pairwise accuracy against expert labels.",
    config_cls=VCRewardConfig,
    stages={"judge": run_judge, "report": run_report},
)
