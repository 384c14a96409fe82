"""What the judge benchmarks share (ConsistencyRank, EditReward-Bench, VCReward-Bench): the
flags, the results file and the report's last step, so one command per judge runs all three.

    paco-eval consistency_rank all --data ConsistencyRank --judge paco:out/run --output_dir e/cr
    paco-eval edit_reward_bench all --data EditReward-Bench --judge paco:out/run --output_dir e/erb
    paco-eval vcreward all --data VCReward-Bench --judge paco:out/run --output_dir e/vc

Each has two stages, ``judge`` (one row per item in ``<output_dir>/judge-<judge>.jsonl``, the
harness's :class:`~paco_eval.harness.ResultsStore`: resumable, refused when written for other
data or another judge) and ``report`` (``report.json`` + ``report.md``: the headline table
beside the paper's rows, per group, per item, coverage, protocol). The judge is ``--judge``
(:mod:`paco_eval.judges`): a ``paco-reward train`` output folder or hub id (``paco:``), a
served evaluator (``server:``), and where the protocol allows a chat judge (``chat:``) or an
image-similarity baseline (``clip:``, ``pixel``, ``dreamsim``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from paco_eval.harness import Report, ResultsStore, check_mode, fingerprint, write_report
from paco_eval.judges import JudgeArguments
from paco_reward.command_line import config_field
from paco_reward.errors import ConfigError, InputError

__all__ = ["JudgeBenchArguments", "data_files", "finish_report", "num", "open_store"]


@dataclass(kw_only=True)
class JudgeBenchArguments(JudgeArguments):
    """The flags of every judge benchmark: the judge's (:class:`JudgeArguments`), the data, the
    output folder, a smoke-run limit and the mode."""

    data: str = config_field(help="The benchmark's data (its layout is in the benchmark's docs).")
    output_dir: str = config_field("judge_eval", help="Folder of the results files and the report.")
    limit: int | None = config_field(None, help="Keep the first N items (a smoke run).")
    mode: Literal["default", "reference"] = config_field(
        "default", help="default (the quirks fixed) or reference (the released code's numbers)."
    )
    progress: bool = config_field(True, help="Show progress bars (--no_progress hides them).")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_mode(self.mode)  # the flag's choices; this checks a config built in Python
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be >= 1; got {self.limit}.")


def data_files(data: str | os.PathLike) -> list[Path]:
    """The files a data path holds (a file, or every file under a folder), for a fingerprint."""
    path = Path(data)
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def open_store(config: JudgeArguments, benchmark: str, stage: str, judge: dict[str, Any],
               inputs: dict[str, Any]) -> ResultsStore:  # fmt: skip
    """The judge's results file ``<output_dir>/judge-<judge>.jsonl``, fingerprinted by the
    benchmark, the judge and ``inputs`` (items, file contents).

    Raises:
        StaleResultsError: the file was written for other inputs or another judge.
    """
    spec = config.judge_spec(stage)
    payload = {"benchmark": benchmark, "judge": judge, **inputs}
    return ResultsStore(Path(config.output_dir) / f"judge-{spec.slug()}.jsonl",  # type: ignore[attr-defined]
                        fingerprint=fingerprint(payload), header={"benchmark": benchmark, "judge": judge})  # fmt: skip


def require_rows(store: ResultsStore, benchmark: str) -> None:
    """Raises :class:`~paco_reward.errors.InputError` when the judge stage wrote nothing yet."""
    if not len(store):
        raise InputError(f"no results in {store.path}: run `paco-eval {benchmark} judge` with the "
                         "same flags first.")  # fmt: skip


def num(value: Any) -> Any:
    """A table value: ``None`` for NaN (nothing to count), never a silent 0."""
    if isinstance(value, float) and value != value:
        return None
    return value


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def headline_lines(report: Report) -> list[str]:
    """The headline table as text lines: this run, then the paper's rows."""
    rows = [("this run", report.table), *report.paper_rows.items()]
    width = max(len(label) for label, _ in rows)
    widths = [max(len(c), 7) for c in report.columns]
    lines = [" " * width + "  " + "  ".join(f"{c:>{w}}" for c, w in zip(report.columns, widths))]
    for label, values in rows:
        cells = "  ".join(f"{_fmt(values.get(c)):>{w}}" for c, w in zip(report.columns, widths))
        lines.append(f"{label:<{width}}  {cells}")
    return lines


def finish_report(report: Report, output_dir: str | os.PathLike, benchmark: str,
                  extra: Iterable[str] = ()) -> int:  # fmt: skip
    """Write ``report.json`` and ``report.md``, print where and the headline table; exit 0."""
    json_path, md_path = write_report(report, output_dir)
    print(f"paco-eval {benchmark} report: {md_path} and {json_path}")
    for line in [*headline_lines(report), *extra]:
        print(f"  {line}")
    return 0
