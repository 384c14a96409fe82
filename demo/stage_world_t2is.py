"""Stage: T2IS-BENCH IN MINIATURE. ``paco-eval t2is`` on the world generator before and after RL.

A trained generator is measured as the paper reports it (its Table 3) by ``paco-eval t2is``:
generate each case's grid and cut it into sub-images, judge them, report. This stage runs
those three stages, through the library functions the command line calls, on the world
generator before RL and after it (arm 1 of stage ``world_grpo``, seed 0: its last
checkpoint's LoRA, loaded as ``--lora`` loads a training run's folder).

The benchmark is a miniature one in T2IS-Bench's own three files: stage ``world_grpo``'s
held-out prompts as cases (2x2 grids, the world's Identity / Style / Logic criteria, each
sub-image's Entity / Attribute / Relation texts), under the task prefix of the world's
category (0001 Character, 0006 Design Style, 0016 Process Generation), with the grid prompts
in PaCo-RL's metadata format (``--prompts``).

The judges are the world's own, in place of the real ones, and the report says so: the world
evaluator (stage ``world_evaluator``) as the consistency judge, asked the benchmark's question
byte for byte; the VQAScore formula over that evaluator for alignment (``judge:world``; not
the paper's CLIP-FlanT5, and a question the evaluator was never trained on); no aesthetics
model. So the report's numbers are the protocol's arithmetic on a tiny judge, not Table 3's.
The world's oracle reads the same sub-images (re-tiled into their grids) beside it.

Writes ``world_t2is/bench/`` (the benchmark's files and the prompts) and, for ``before`` and
``after``, ``world_t2is/<when>/images/`` and ``world_t2is/<when>/report.{json,md}``.
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from data_pipeline.storage import write_jsonl
from demo.context import DemoContext, ReportSection
from demo.documented import documented
from demo.stage_world_grpo import HELD_OUT, PACO, world_models
from demo.world_generator import held_out_prompts, quiet_clip_truncation
from demo.world_judge import judge_grids

# The T2IS-Bench task whose category is the world prompt's (paco_eval/t2is/cases.json).
TASK_OF_CATEGORY = {
    "Character Generation": "0001",
    "Design Style Generation": "0006",
    "Process Generation": "0016",
}
JUDGE = "world"
# Sampling as stage world_grpo judges its grids (ODE, 20 steps, 64-px 2x2 grids).
STEPS = 20
RL_SEED = 0
TABLE = ("VC-Identity", "VC-Style", "VC-Logic", "PA-Entity", "PA-Attribute", "PA-Relation")


# World cases are numbered from 9001, past the real benchmark's (at most 36 a task), so that
# none is taken for a real case (such as one of PaCo-RL's training split).
FIRST_CASE = 9001


def case_id(record: dict, number: int) -> str:
    """A world prompt's case id: its category's T2IS task and a case number from
    :data:`FIRST_CASE` (``number`` counts from 1)."""
    return f"{TASK_OF_CATEGORY[record['category']]}_{FIRST_CASE + number - 1:04d}"


def write_world_bench(records: list[dict], folder: Path) -> tuple[Path, Path]:
    """T2IS-Bench's three files for world prompt ``records`` in ``folder / "bench"``, and
    their grid prompts as PaCo-RL's metadata (``original_idx`` = case id) in
    ``folder / "prompts.jsonl"``; returns both paths."""
    from data_pipeline.synthetic import panel_description
    from paco_reward.grids import parse_layout

    bench_dir = folder / "bench"
    bench_dir.mkdir(parents=True, exist_ok=True)
    meta, consistency, alignment, prompts = {}, {}, {}, []
    for number, record in enumerate(records, 1):
        case = case_id(record, number)
        attrs = record["synthetic"]["attributes"]
        rows, cols = parse_layout(record["layout"])
        count = rows * cols
        meta[case] = {
            "task_name_case_id": f"{record['task_name']}_{case[-4:]}",
            "output_image_count": count,
        }
        consistency[case] = {dim: [dict(texts)] for dim, texts in record["criteria"].items()}
        alignment[case] = {
            str(k + 1): {
                "Entity": [f"a {attrs['colour']} {attrs['shape']} character"],
                "Attribute": [
                    f"{attrs['marking']} markings",
                    f"a {attrs['palette']}-toned {attrs['texture']} background",
                ],
                "Relation": [panel_description(k)],
            }
            for k in range(count)
        }
        prompts.append(
            {
                "original_idx": case,
                **{k: record[k] for k in ("prompt", "layout", "height", "width")},
            }
        )
    for name, content in (("T2IS-Bench.json", meta), ("prompt_consistency.json", consistency),
                          ("prompt_alignment.json", alignment)):  # fmt: skip
        (bench_dir / name).write_text(json.dumps(content, indent=1), encoding="utf-8")
    prompts_path = folder / "prompts.jsonl"
    write_jsonl(prompts_path, prompts)
    return bench_dir, prompts_path


def tile(panels: list[Image.Image], rows: int, cols: int) -> Image.Image:
    """Sub-images back into their grid, row-major (what the oracle reads)."""
    width, height = panels[0].size
    grid = Image.new("RGB", (cols * width, rows * height))
    for k, panel in enumerate(panels):
        grid.paste(panel, ((k % cols) * width, (k // cols) * height))
    return grid


def evaluate(bench: Path, prompts: Path, folder: Path, generator: Path, evaluator: Path,
             lora: Path | None, seed: int) -> dict:  # fmt: skip
    """``paco-eval t2is`` generate, judge and report into ``folder`` (the world's judges);
    the report's dict."""
    from paco_eval.t2is.benchmark import T2ISConfig
    from paco_eval.t2is.generate import run_generate
    from paco_eval.t2is.stages import run_judge, run_report

    config = T2ISConfig(
        data=str(bench),
        images_dir=str(folder / "images"),
        output_dir=str(folder),
        consistency_judges=[f"{JUDGE}=paco:{evaluator}"],
        alignment=f"judge:{JUDGE}",
        aesthetics="",
        prompts=str(prompts),
        pipeline="flux",
        model_name_or_path=str(generator),
        lora=str(lora) if lora else None,
        resolution=64,
        grid_size="square",
        num_inference_steps=STEPS,
        max_sequence_length=64,
        seed=seed,
    )
    with quiet_clip_truncation():
        for stage in (run_generate, run_judge, run_report):
            stage(config)
    return json.loads((folder / "report.json").read_text(encoding="utf-8"))


def oracle_reading(folder: Path, records: list[dict]) -> dict:
    """The oracle's judgement of a folder's sub-images, re-tiled into their grids."""
    from paco_reward.grids import parse_layout

    grids = []
    for number, record in enumerate(records, 1):
        rows, cols = parse_layout(record["layout"])
        case = case_id(record, number)
        panels = [
            Image.open(folder / "images" / f"{case}_{k:04d}.png").convert("RGB")
            for k in range(rows * cols)
        ]
        grids.append(tile(panels, rows, cols))
    return judge_grids(grids, records)


def run(ctx: DemoContext) -> None:
    models = world_models(ctx)
    if models is None:
        return
    config, generator, evaluator, _ = models
    run_dir = ctx.path("world_grpo", f"{PACO.slug}_seed{RL_SEED}")
    if not (run_dir / "checkpoints").is_dir():
        print(f"No RL run at {run_dir} (run the world_grpo stage): skipped.")
        return
    records = held_out_prompts(config, HELD_OUT)
    bench, prompts = write_world_bench(records, ctx.path("world_t2is"))
    print(
        f"T2IS-BENCH IN MINIATURE: paco-eval t2is (generate, judge, report) on {len(records)} "
        f"held-out world cases, the generator before RL and after ({PACO.name}, seed {RL_SEED}). "
        "Judges: the world evaluator for consistency and, through the VQAScore formula, for "
        "alignment; no aesthetics model. They stand in for the paper's Qwen2.5-VL-7B, Gemma-3 "
        "and CLIP-FlanT5, so these are not Table 3's numbers."
    )
    reports, oracle = {}, {}
    for when, lora in (("before", None), ("after", run_dir)):
        folder = ctx.path("world_t2is", when)
        reports[when] = evaluate(bench, prompts, folder, generator, evaluator, lora, ctx.seed)
        oracle[when] = oracle_reading(folder, records)
    before, after = reports["before"]["table"], reports["after"]["table"]
    rows = [[column, before[column], after[column], after[column] - before[column]]
            for column in TABLE if before.get(column) is not None]  # fmt: skip
    rows += [[f"oracle {key}", oracle["before"][key], oracle["after"][key],
              oracle["after"][key] - oracle["before"][key]] for key in ("consistency", "alignment")]  # fmt: skip
    ctx.table(
        ReportSection(
            "T2IS-Bench in miniature",
            f"paco-eval t2is on {len(records)} held-out world cases (2x2), before -> after RL "
            f"({PACO.name}, seed {RL_SEED}); VC / PA judged by the world evaluator (PA: the "
            "VQAScore formula over it), no aesthetics and so no Avg: not the paper's judges; "
            "the oracle reads the same sub-images",
            ["column", "before", "after", "change"],
            rows,
        )
    )
    vc = [c for c in TABLE if c.startswith("VC-")]
    gain = sum(after[c] - before[c] for c in vc) / len(vc)
    print(documented("world_t2is.vc", gain))
    print(f"Reports: {ctx.path('world_t2is', 'before', 'report.md')}, "
          f"{ctx.path('world_t2is', 'after', 'report.md')}")  # fmt: skip
    ctx.artifacts["world_t2is"] = reports
