"""Stage: PaCo's data and SFT on the world generator's own grids.

The paper builds PaCo-Reward's pairs from images that generators drew, labelled by people.
This stage does that for the world's generator (stage ``generator``): it draws four grids
for each of 288 prompts of its world, the data pipeline cuts them into ranking instances,
the simulated annotators rank what the world's oracle reads in each panel
(:func:`data_pipeline.pipeline.run_oracle_annotated`; an instance with a panel the oracle
cannot read is not ranked), and the demo's SFT recipe fine-tunes the ``train`` stage's
evaluator on the export for :data:`SFT_STEPS` steps. It is the evaluator of the RL
experiments: the ``train`` stage's own, trained on the world's crisp renders, does not judge
this generator's blurry 32-px panels (``python -m demo.reward_vs_oracle`` measures it;
docs/miniature-study.md, "The world evaluator"). Starting from it rather than from the
stand-in takes a third of the steps and judges better (ROC-AUC .743 after 400 steps against
.723 after 1,200 steps from the stand-in, on the same data; same page).

Sets ``ctx.artifacts["world_evaluator"]``.
"""

from __future__ import annotations

import time

from data_pipeline.export import ExportConfig
from data_pipeline.pipeline import run_oracle_annotated
from data_pipeline.storage import save_image_atomic, write_jsonl
from data_pipeline.synthetic import SimulatedAnnotators
from demo import pretrained
from demo.context import DemoContext, ReportSection
from demo.documented import documented
from demo.stage_train import compare, sft_recipe, train_distributed, trained_evaluator
from demo.world_generator import (
    GeneratorConfig,
    generator_world,
    sample_grids,
)

PROMPTS = 288
GRIDS_PER_PROMPT = 4
# The evaluator's prompts: neither the generator's, the held-out nor the RL train prompts.
DATA_START = 400_000
BATCH = 32
# Fine-tuning steps from the train stage's evaluator (it already knows the task on renders).
SFT_STEPS = 400


def draw_grids(pipe, records: list[dict], grids_dir, seed: int) -> None:
    """``<grids_dir>/<idx>/<g>.png`` for every record and grid seed ``g`` (kept if present)."""
    for g in range(GRIDS_PER_PROMPT):
        for start in range(0, len(records), BATCH):
            batch = records[start : start + BATCH]
            if all((grids_dir / r["idx"] / f"{g}.png").is_file() for r in batch):
                continue
            images = sample_grids(pipe, batch, seed=seed * 10_000 + g * 1_000 + start)
            for record, image in zip(batch, images):
                save_image_atomic(image, grids_dir / record["idx"] / f"{g}.png")


def run(ctx: DemoContext) -> None:
    from diffusers import FluxPipeline

    from paco_reward import PacoReward
    from paco_reward.baselines import CLIPImageScorer
    from paco_reward.testing.clip import build_tiny_clip
    from paco_reward.training.loading import load_pair_dataset_dict

    base = trained_evaluator(ctx)
    if base is None:
        print("No evaluator of the world's renders to fine-tune (run the train stage): skipped.")
        return
    config = GeneratorConfig(seed=ctx.seed)
    generator = ctx.artifacts.get("world_generator") or pretrained.generator(ctx.seed)
    work = ctx.path("world_data", "work")
    records = generator_world(config).make_prompts(PROMPTS, start=DATA_START)
    prompts_path = work / "inputs" / "prompts.jsonl"
    write_jsonl(prompts_path, records)
    start = time.perf_counter()
    draw_grids(
        FluxPipeline.from_pretrained(generator), records, work / "inputs" / "grids", ctx.seed
    )
    drawn = time.perf_counter() - start
    stats = run_oracle_annotated(
        work,
        prompts_path,
        work / "inputs" / "grids",
        SimulatedAnnotators(seed=ctx.seed),
        export=ExportConfig(test_fraction=0.125, seed=ctx.seed, balance_train_labels=True),
    )
    export = work / "export"
    print(
        f"PaCo data on the generator's grids: {PROMPTS} prompts x {GRIDS_PER_PROMPT} grids drawn "
        f"in {drawn:.0f}s; {stats['oracle_readable_instances']} of {stats['instances']} "
        f"instances readable by the oracle; {stats['pairs']['consistent']} consistent and "
        f"{stats['pairs']['inconsistent']} inconsistent pairs."
    )

    output_dir = ctx.path("models", "world-evaluator")
    recipe = sft_recipe(output_dir, base, export, ctx.seed, steps=SFT_STEPS)
    start = time.perf_counter()
    train_distributed(recipe, ctx.path("models", "world-evaluator.yaml"))
    elapsed = time.perf_counter() - start
    rm = PacoReward.from_pretrained(output_dir)
    clip = CLIPImageScorer(build_tiny_clip(ctx.path("models", "tiny-clip"), seed=ctx.seed))
    test = load_pair_dataset_dict(export)["test"]
    compared = compare(rm, test, clip)
    rows = [[len(test), r["method"], r["accuracy"], r["roc_auc"]] for r in compared]
    ctx.table(
        ReportSection(
            "PaCo evaluator of the generator's grids",
            f"PaCo SFT of the train stage's evaluator ({SFT_STEPS} steps, {elapsed:.0f}s) on "
            f"{PROMPTS} prompts x "
            f"{GRIDS_PER_PROMPT} generated grids; held-out prompts' pairs, annotator labels",
            ["pairs", "method", "accuracy", "ROC-AUC"],
            rows,
        )
    )
    print(documented("world_evaluator.roc_auc", compared[-1]["roc_auc"]))
    ctx.artifacts["world_evaluator"] = output_dir
