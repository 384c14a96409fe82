"""``paco-data``: the dataset pipeline, one subcommand per stage.

Every step reads and writes a *work folder*; each is resumable and safe to re-run::

    paco-data prompts   WORK --input train_metadata.jsonl
    paco-data grids     WORK --from_dir GRIDS_DIR        # or --pipeline FLUX_DIR --seeds 0 1 2 3
    paco-data instances WORK [--rule other_grid]
    paco-data annotate  WORK [--annotator NAME] [--port 8765]   # rank instances in a browser
    paco-data rankings  WORK [RANKINGS.jsonl ...] [--method borda]
    paco-data pairs     WORK [--top_k 1 --bottom_k 1] [--edit_pairs EDITS.jsonl]
    paco-data reasons   WORK --teacher openai --base_url URL --model NAME
    paco-data export    WORK [--out DIR] [--test_fraction 0.1] [--dataset_name paco]
    paco-data stats     WORK
    paco-data probe     WORK                    # can one image alone predict the label?

    paco-data synthetic WORK [--n_prompts 12]   # synthetic inputs (prompts + grids)
    paco-data simulate-rankings WORK            # synthetic annotators' rankings
    paco-data demo      WORK                    # every stage on the synthetic world

Each subcommand's flags are the fields of its config dataclass (``PairingConfig``,
``LabelRule``, ``ExportConfig``, ``SyntheticConfig``, ``AnnotateConfig`` or one of the
``*Arguments`` of :mod:`data_pipeline.arguments`), ``--field_name`` or ``--field-name``; see
:mod:`paco_reward.command_line` for the dialect (exit 0 / 1 one-line error / 2 usage).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from data_pipeline.annotate.config import AnnotateConfig
from data_pipeline.arguments import (
    ExportArguments,
    GridsArguments,
    InstancesArguments,
    PairsArguments,
    ProbeArguments,
    PromptsArguments,
    RankingsArguments,
    ReasonsArguments,
    SimulateArguments,
    StatsArguments,
    SyntheticArguments,
    config_part,
)
from data_pipeline.export import ExportConfig
from data_pipeline.instances import PairingConfig
from data_pipeline.pairs import LabelRule
from data_pipeline.pipeline import SyntheticConfig
from paco_reward.command_line import Command, run_cli

__all__ = ["COMMANDS", "main"]


def prompts(args: PromptsArguments) -> int:
    from data_pipeline.prompts import prepare_prompts

    out = prepare_prompts(args.input, args.work_dir, limit=args.limit, source=args.source)
    print(f"prompts -> {out}")
    return 0


def grids(args: GridsArguments) -> int:
    from data_pipeline.generate import generate_grids, ingest_grids

    if args.from_dir is not None:
        out = ingest_grids(args.from_dir, args.work_dir, min_grids=args.min_grids)
    else:
        import torch
        from diffusers import DiffusionPipeline

        from paco_reward.devices import resolve_device

        pipe = DiffusionPipeline.from_pretrained(args.pipeline, dtype=getattr(torch, args.dtype))
        pipe = pipe.to(resolve_device(args.device))  # None / "cuda": this process's GPU
        kwargs = {"num_inference_steps": args.steps, "guidance_scale": args.guidance_scale}
        if args.max_sequence_length:
            kwargs["max_sequence_length"] = args.max_sequence_length
        out = generate_grids(
            pipe, args.work_dir, seeds=args.seeds, height=args.height, width=args.width, **kwargs
        )
    print(f"panels -> {out}")
    return 0


def instances(args: InstancesArguments) -> int:
    from data_pipeline.instances import build_instances

    print(f"instances -> {build_instances(args.work_dir, config_part(args, PairingConfig))}")
    return 0


def annotate(config: AnnotateConfig) -> int:
    from data_pipeline.annotate import serve

    print(f"annotate: open {config.url()} (Ctrl+C stops; every submitted ranking is on disk)")
    sys.stdout.flush()
    serve(config)
    return 0


def rankings(args: RankingsArguments) -> int:
    from data_pipeline.rankings import AGREEMENT_FILE, ingest_rankings

    out = ingest_rankings(args.work_dir, list(args.rankings), method=args.method)
    agreement = json.loads((Path(args.work_dir) / AGREEMENT_FILE).read_text())
    print(f"rankings -> {out}\nagreement: {json.dumps(agreement)}")
    return 0


def pairs(args: PairsArguments) -> int:
    from data_pipeline.pairs import build_pairs

    out = build_pairs(args.work_dir, config_part(args, LabelRule), edit_pairs=args.edit_pairs)
    print(f"pairs -> {out}")
    return 0


def reasons(args: ReasonsArguments) -> int:
    from data_pipeline.pairs import read_pairs
    from data_pipeline.reasons import REASONS_FILE, ReasonRejected, annotate_reasons

    if args.teacher == "openai":
        from data_pipeline.reasons import OpenAITeacher

        teacher = OpenAITeacher(
            args.base_url,
            args.model,
            api_key=os.environ.get(args.api_key_env, "EMPTY"),
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            timeout=args.timeout,
        )
    else:
        from data_pipeline.pipeline import synthetic_teacher

        teacher = synthetic_teacher(args.work_dir)
    stats = annotate_reasons(
        read_pairs(args.work_dir),
        teacher,
        Path(args.work_dir) / REASONS_FILE,
        image_root=args.work_dir,
        concurrency=args.concurrency,
        max_attempts=args.max_attempts,
        backoff_s=args.backoff_s,
        load_images=args.teacher == "openai",
        progress=args.progress,
    )
    print(f"reasons: {json.dumps(stats.as_dict())}")
    if stats.failed:
        raise ReasonRejected(
            f"{stats.failed} of {stats.total} pairs in {args.work_dir} got no acceptable reason; "
            "re-run to ask for them again."
        )
    return 0


def export(args: ExportArguments) -> int:
    from data_pipeline.export import export_dataset

    print(f"export -> {export_dataset(args.work_dir, args.out, config_part(args, ExportConfig))}")
    return 0


def stats(args: StatsArguments) -> int:
    from data_pipeline.stats import format_table, write_stats

    print(format_table(write_stats(args.work_dir, args.export_dir)))
    return 0


def probe(args: ProbeArguments) -> int:
    from data_pipeline.probe import leakage_probe

    report = leakage_probe(args.dataset or Path(args.work_dir) / "export" / "hf")
    width = max(len(k) for k in report)
    for key, value in report.items():
        shown = f"{value:.4f}" if isinstance(value, float) else f"{value}"
        print(f"{key.ljust(width)}  {shown}")
    return 0


def synthetic(args: SyntheticArguments) -> int:
    from data_pipeline.pipeline import make_synthetic_inputs

    config = config_part(args, SyntheticConfig)
    paths = make_synthetic_inputs(args.work_dir, config, args.overwrite_output_dir)
    print(f"synthetic prompts -> {paths['prompts']}\nsynthetic grids -> {paths['grids']}")
    return 0


def simulate(args: SimulateArguments) -> int:
    from data_pipeline.pipeline import simulate_rankings

    print(f"simulated rankings -> {simulate_rankings(args.work_dir, args.out)}")
    return 0


def demo(args: SyntheticArguments) -> int:
    from data_pipeline.pipeline import run_synthetic
    from data_pipeline.stats import format_table

    config = config_part(args, SyntheticConfig)
    stats = run_synthetic(args.work_dir, config, overwrite=args.overwrite_output_dir)
    print(format_table(stats))
    return 0


COMMANDS = [
    Command("prompts", PromptsArguments, prompts, "stage 1: read T2IS-style prompts"),
    Command("grids", GridsArguments, grids, "stage 2: ingest or generate grids and cut panels"),
    Command("instances", InstancesArguments, instances, "stage 3: ranking instances"),
    Command("annotate", AnnotateConfig, annotate, "stage 4 by hand: rank instances in a browser"),
    Command("rankings", RankingsArguments, rankings, "stage 4: ingest and merge rankings"),
    Command("pairs", PairsArguments, pairs, "stage 5: rankings -> Yes/No pairs"),
    Command("reasons", ReasonsArguments, reasons, "stage 6: a teacher's reason for every pair"),
    Command(
        "export",
        ExportArguments,
        export,
        "stage 7: DatasetDict, parquet, LLaMA-Factory, ConsistencyRank",
    ),  # fmt: skip
    Command("stats", StatsArguments, stats, "stage 8: statistics (JSON + table)"),
    Command("probe", ProbeArguments, probe, "label-leakage probe of the export (test AUCs)"),
    Command("synthetic", SyntheticArguments, synthetic, "write synthetic prompts and grids"),
    Command("simulate-rankings", SimulateArguments, simulate, "rankings by simulated annotators"),
    Command("demo", SyntheticArguments, demo, "every stage on the synthetic world"),
]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-data``; returns the exit status."""
    return run_cli("paco-data", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
