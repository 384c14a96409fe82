"""``paco-eval gedit``: GEdit-Bench's stages and flags (docs/gedit-bench.md).

    paco-eval gedit generate --pipeline flux_kontext \\
        --model_name_or_path black-forest-labs/FLUX.1-Kontext-dev --lora run/checkpoint-300 \\
        --images_dir out/gedit --model_name kontext-paco
    paco-eval gedit judge --images_dir out/gedit --model_name kontext-paco --output_dir out/eval \\
        --judge chat:http://127.0.0.1:8000/v1@Qwen/Qwen2.5-VL-72B-Instruct-AWQ
    paco-eval gedit report ...             # the judge stage's flags: report.json + report.md

generate writes ``<images_dir>/<model_name>/fullset/<task_type>/<lang>/<key>.png`` (one shard
per process under ``accelerate launch``); edits made elsewhere in that layout skip it. judge
appends one row per ``<lang>/<key>`` to ``<output_dir>/judge-<judge>-<mode>.jsonl`` (the
harness's :class:`~paco_eval.harness.ResultsStore`: resumable, and refused when it was written
for other edits, rows, judge, prompts or mode). report writes the per-language, per-subset
table (macro over the 11 groups, the official figure), the per-group table with the micro
mean as its last row, coverage and the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from paco_eval.harness import check_mode
from paco_eval.judges import JudgeArguments
from paco_eval.registry import Benchmark
from paco_reward.command_line import config_field
from paco_reward.errors import ConfigError, InputError

__all__ = ["BENCHMARK", "GEditConfig"]

# The layout's and the report's names of the two parts of a language's table.
PARTS = {"fullset": "", "intersection": "-I"}
METRICS = {"sc": "SC", "pq": "PQ", "overall": "O"}


@dataclass(kw_only=True)
class GEditConfig(JudgeArguments):
    """Evaluate an editor on GEdit-Bench (generate, judge, report)."""

    judge_kinds: ClassVar[tuple[str, ...]] = ("chat", "local")  # VIEScore needs text answers
    bare_judge_kinds: ClassVar[tuple[str, str]] = ("chat", "local")

    data: str = config_field(
        "stepfun-ai/GEdit-Bench",
        help="The hub dataset id, a parquet file or folder, or a folder with rows.jsonl.",
    )
    images_dir: str = config_field(
        "gedit_results", help="Root of the edits: <images_dir>/<model_name>/fullset/<task>/<lang>/."
    )
    model_name: str = config_field("model", help="The editor's folder under images_dir.")
    output_dir: str = config_field("gedit_eval", help="Folder of the results files and the report.")
    language: Literal["all", "en", "cn", "zh"] = config_field(
        "all", help="Instruction language: all, en or cn (zh is an alias of cn)."
    )
    subset: Literal["fullset", "paco_heldout"] = config_field(
        "fullset",
        help="fullset, or paco_heldout (the 128 rows PaCo-RL's editors were not trained on).",
    )
    groups: list[str] = config_field(list, help="Task groups to keep (repeatable; default all 11).")
    limit: int | None = config_field(None, help="Keep the first N selected rows (a smoke run).")
    mode: Literal["default", "reference"] = config_field(
        "default",
        help="reference (Step1X-Edit@570eba6's parser as its seeded Qwen route runs it, quirks "
        "included) or default (integer 0-10 scores, bounded retries, unparsed = missing).",
    )
    max_tries: int = config_field(3, help="Judge calls per prompt before an item is missing.")
    # generate
    pipeline: str | None = config_field(
        None, help="generate: the editing pipeline (flux_kontext, qwen_image_edit, ...)."
    )
    model_name_or_path: str | None = config_field(
        None, help="generate: the editor's folder or hub id."
    )
    lora: str | None = config_field(
        None, help="generate: a LoRA folder or file (a GRPO run's checkpoint folder)."
    )
    num_inference_steps: int = config_field(28, help="generate: sampling steps.")
    seed: int = config_field(0, help="generate: base seed; row i samples with seed + i.")
    dtype: Literal["bfloat16", "float16", "float32"] = config_field(
        "bfloat16", help="generate: the editor's dtype."
    )
    pipeline_kwargs: dict[str, Any] = config_field(
        dict,
        help="generate: more call arguments (--pipeline_kwargs.guidance_scale 2.5, height, "
        "width, max_area, ...).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_mode(self.mode)  # the flag's choices; this checks a config built in Python
        from paco_eval.gedit.data import check_group  # light: PIL, no model code

        for group in self.groups:
            check_group(group)
        for name in ("max_tries", "num_inference_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name} must be >= 1; got {getattr(self, name)}.")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be >= 1; got {self.limit}.")

    @property
    def languages(self) -> list[str]:
        """The selected languages, in the data's names."""
        from paco_eval.gedit.data import LANGUAGES, normalize_language

        return list(LANGUAGES) if self.language == "all" else [normalize_language(self.language)]

    @property
    def scoring_mode(self) -> str:
        """``score_item``'s name of the mode."""
        from paco_eval.gedit.viescore import REFERENCE

        return REFERENCE if self.mode == "reference" else "default"


def _rows(config: GEditConfig) -> list:
    from paco_eval.gedit.data import load_rows, select_rows

    return select_rows(load_rows(config.data), subset=config.subset, languages=config.languages,
                       groups=config.groups or None, limit=config.limit)  # fmt: skip


def _store(config: GEditConfig, rows: list, stage: str):
    """The judge's results file, refused when it was written for other inputs."""
    from paco_eval.gedit.bench import RESULTS_KEY
    from paco_eval.gedit.data import edit_path, source_path
    from paco_eval.gedit.prompts import PQ_PROMPT_SHA256, SC_PROMPT_SHA256
    from paco_eval.harness import ResultsStore, file_fingerprint, fingerprint

    root, model = config.images_dir, config.model_name
    images = [p for r in rows for p in (edit_path(root, model, r), source_path(root, model, r))]
    judge = config.judge_id(stage)
    inputs = {
        "benchmark": "gedit",
        "rows": fingerprint([[r.item_id, r.task_type, r.instruction, r.intersection] for r in rows]),
        "images": file_fingerprint(images),
        "judge": judge,
        "prompts": [SC_PROMPT_SHA256, PQ_PROMPT_SHA256],
        "mode": config.scoring_mode,
        "max_tries": config.max_tries,
    }
    name = f"judge-{config.judge_spec(stage).slug()}-{config.mode}.jsonl"
    header = {"benchmark": "gedit", "judge": judge, "mode": config.scoring_mode}
    return ResultsStore(Path(config.output_dir) / name, fingerprint=fingerprint(inputs),
                        header=header, key=RESULTS_KEY)  # fmt: skip


def run_generate(config: GEditConfig) -> int:
    """Edit this process's shard of the selected rows (skipping edits already on disk).

    Without ``--pipeline`` and ``--model_name_or_path`` the edits are taken as made elsewhere
    in the layout: nothing is written (no manifest either, so a later real run is not refused)
    and the stage says how many are there, so ``all`` runs on such a folder.
    """
    from paco_eval.gedit.data import edit_path

    given = {n: getattr(config, n) is not None for n in ("pipeline", "model_name_or_path")}
    if not any(given.values()):
        rows = _rows(config)
        present = sum(edit_path(config.images_dir, config.model_name, r).is_file() for r in rows)
        print(f"paco-eval gedit generate: no --pipeline, so the edits are taken as made elsewhere: "
              f"{present} of {len(rows)} under {Path(config.images_dir) / config.model_name}; "
              "the judge stage records the others as missing.")  # fmt: skip
        return 0
    if not all(given.values()):
        missing = " and ".join(f"--{n}" for n, ok in given.items() if not ok)
        raise ConfigError(f"the generate stage needs {missing} too (the editor to load).")

    from accelerate import PartialState

    from paco_eval.gedit.generate import generate_edits

    state = PartialState()  # accelerate launch: one shard per process, each on its own device
    counts = generate_edits(
        _rows(config), config.images_dir, config.model_name, pipeline=config.pipeline,
        model_name_or_path=config.model_name_or_path, lora=config.lora,
        num_inference_steps=config.num_inference_steps, seed=config.seed,
        shard_index=state.process_index, num_shards=state.num_processes,
        device=config.device or str(state.device), dtype=config.dtype,
        pipeline_kwargs=config.pipeline_kwargs,
    )  # fmt: skip
    print(f"paco-eval gedit generate: {counts['written']} written, {counts['skipped']} already "
          f"there (shard {state.process_index + 1}/{state.num_processes}) under "
          f"{Path(config.images_dir) / config.model_name}")  # fmt: skip
    return 0


def run_judge(config: GEditConfig) -> int:
    """Score every selected row not in the results file yet."""
    from paco_eval.gedit.bench import judge_rows

    rows = _rows(config)
    store = _store(config, rows, "judge")
    judge = config.chat_judge("judge")
    counts = judge_rows(rows, config.images_dir, config.model_name, judge, store,
                        mode=config.scoring_mode, max_tries=config.max_tries)  # fmt: skip
    print(f"paco-eval gedit judge: {counts['scored']} scored, {counts['missing_edit']} without "
          f"an edit, {counts['skipped']} already in {store.path}")  # fmt: skip
    return 0


def _num(value: Any) -> float | None:
    """A table value: ``None`` for NaN (nothing scored), never a silent 0."""
    return None if value is None or value != value else float(value)


def build_report(config: GEditConfig, rows: list, records: list[dict], judge: dict) -> Any:
    """The harness :class:`~paco_eval.harness.Report` of the results ``records``."""
    from paco_eval.gedit.bench import protocol, report_tables
    from paco_eval.gedit.data import GROUPS
    from paco_eval.harness import Report, library_versions

    tables = report_tables(records, mode=config.scoring_mode, groups=config.groups or None)
    columns = [f"{lang.upper()}{suffix} {label}" for lang in config.languages
               for suffix in PARTS.values() for label in METRICS.values()]  # fmt: skip

    def cells(pick) -> dict[str, float | None]:
        return {f"{lang.upper()}{suffix} {label}": _num(pick(tables[lang][part])[metric])
                for lang in config.languages for part, suffix in PARTS.items()
                for metric, label in METRICS.items()}  # fmt: skip

    groups = {g: cells(lambda t, g=g: t["groups"][g]) for g in config.groups or GROUPS}
    groups["micro (all rows)"] = cells(lambda t: t["micro"])
    selected = {r.item_id for r in rows}
    scored_rows = [r for r in records if r["item"] in selected]
    items = {r["item"]: {"group": r["task_type"], "intersection": r["intersection"],
                         "SC": _num(r["sc"]), "PQ": _num(r["pq"]), "O": _num(r["overall"]),
                         "guessed": ",".join(r.get("guessed") or []) or None,
                         "reason": r.get("reason")} for r in scored_rows}  # fmt: skip
    coverage = {
        "rows_selected": len(rows),
        "rows_judged": len(scored_rows),
        "rows_not_judged_yet": len(selected - {r["item"] for r in scored_rows}),
        "rows_missing_an_edit": sum(str(r.get("reason", "")).startswith("no edit at")
                                    for r in scored_rows),  # fmt: skip
        "guessed_items": len(tables["guessed_items"]),
    }
    for lang in config.languages:  # items / scored / missing, and the groups with a score
        coverage[lang] = tables[lang]["coverage"] | {
            "groups_scored": tables[lang]["fullset"]["n_groups"],
            "groups_scored_I": tables[lang]["intersection"]["n_groups"],
        }
    notes = [
        "Headline: the unweighted mean of the group means (macro, Step1X-Edit's "
        "calculate_statistics.py). The per-group table's last row is the mean over rows "
        "(micro, lmms-eval's convention), not the official figure.",
        "-I columns: the rows with Intersection_exist.",
    ]
    if config.mode == "reference":
        notes.append("reference mode: unparseable answers get the released parser's seeded "
                     "random guess (SC 10), as the released code scores them.")  # fmt: skip
    else:
        notes.append("default mode: scores must be integers 0-10; an item whose answers do not "
                     "parse in max_tries is missing (counted in coverage), never guessed.")  # fmt: skip
    if config.subset == "fullset":
        notes.append("PaCo-RL's editors were trained on all but 128 of these rows; "
                     "--subset paco_heldout scores those 128 alone.")  # fmt: skip
    judge_model = str(judge.get("spec", ""))
    if "Qwen2.5-VL-72B-Instruct-AWQ" not in judge_model:
        notes.append("The published GEdit-Bench numbers reproduce only with the "
                     "Qwen2.5-VL-72B-Instruct-AWQ judge (Step1X-Edit #125); this judge is "
                     f"{judge_model}.")  # fmt: skip
    proto = protocol(judge, config.scoring_mode, config.max_tries)
    proto |= {"data": config.data, "subset": config.subset, "languages": config.languages,
              "images": str(Path(config.images_dir) / config.model_name),
              "versions": library_versions()}  # fmt: skip
    return Report(benchmark="gedit", mode=config.mode, columns=columns, table=cells(lambda t: t["macro"]),
                  groups=groups, items=items, coverage=coverage, protocol=proto, notes=notes,
                  title=f"GEdit-Bench: {config.model_name}")  # fmt: skip


def run_report(config: GEditConfig) -> int:
    """Write report.json and report.md from the judge stage's results file."""
    from paco_eval.harness import write_report

    rows = _rows(config)
    store = _store(config, rows, "report")
    if not len(store):
        raise InputError(f"no results in {store.path}: run `paco-eval gedit judge` with the same "
                         "flags first.")  # fmt: skip
    report = build_report(config, rows, store.rows(), config.judge_id("report"))
    json_path, md_path = write_report(report, config.output_dir)
    print(f"paco-eval gedit report: {md_path} and {json_path}")
    for column in report.columns:
        value = report.table[column]
        print(f"  {column}: {'—' if value is None else f'{value:.3f}'}")
    return 0


BENCHMARK = Benchmark(
    name="gedit",
    help="GEdit-Bench: VIEScore SC, PQ and O of an editor's edits, per language and subset.",
    config_cls=GEditConfig,
    stages={"generate": run_generate, "judge": run_judge, "report": run_report},
)
