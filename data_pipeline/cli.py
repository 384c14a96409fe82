"""``paco-data``: the dataset pipeline, one subcommand per stage.

Every step reads and writes a *work folder*; each is resumable and safe to re-run::

    paco-data prompts   WORK --input train_metadata.jsonl
    paco-data grids     WORK --from GRIDS_DIR            # or --pipeline FLUX_DIR --seeds 0 1 2 3
    paco-data instances WORK [--rule other_grid]
    paco-data annotate  WORK [--annotator NAME] [--port 8765]   # rank instances in a browser
    paco-data rankings  WORK [RANKINGS.jsonl ...] [--method borda]
    paco-data pairs     WORK [--top-k 1 --bottom-k 1] [--edit-pairs EDITS.jsonl]
    paco-data reasons   WORK --teacher openai --base-url URL --model NAME
    paco-data export    WORK [--out DIR] [--test-fraction 0.1]
    paco-data stats     WORK
    paco-data probe     WORK                    # can one image alone predict the label?

    paco-data synthetic WORK [--prompts 12]     # synthetic inputs (prompts + grids)
    paco-data simulate-rankings WORK            # synthetic annotators' rankings
    paco-data demo      WORK                    # every stage on the synthetic world
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger(__name__)


def _cmd_prompts(args) -> int:
    from data_pipeline.prompts import prepare_prompts

    out = prepare_prompts(args.input, args.work_dir, limit=args.limit, source=args.source)
    print(f"prompts -> {out}")
    return 0


def _cmd_grids(args) -> int:
    from data_pipeline.generate import generate_grids, ingest_grids

    if (args.from_dir is None) == (args.pipeline is None):
        print(
            "grids: give exactly one of --from GRIDS_DIR or --pipeline PIPELINE_DIR",
            file=sys.stderr,
        )
        return 2
    if args.from_dir is not None:
        out = ingest_grids(args.from_dir, args.work_dir, min_grids=args.min_grids)
    else:
        import torch
        from diffusers import DiffusionPipeline

        dtype = getattr(torch, args.dtype)
        pipe = DiffusionPipeline.from_pretrained(args.pipeline, dtype=dtype)
        pipe = pipe.to(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        kwargs = {"num_inference_steps": args.steps, "guidance_scale": args.guidance_scale}
        if args.max_sequence_length:
            kwargs["max_sequence_length"] = args.max_sequence_length
        out = generate_grids(
            pipe, args.work_dir, seeds=args.seeds, height=args.height, width=args.width, **kwargs
        )
    print(f"panels -> {out}")
    return 0


def _cmd_instances(args) -> int:
    from data_pipeline.instances import PairingConfig, build_instances

    config = PairingConfig(
        rule=args.rule,
        max_candidates=args.max_candidates,
        seed=args.seed,
        shuffle_candidates=args.shuffle,
    )
    print(f"instances -> {build_instances(args.work_dir, config)}")
    return 0


def _cmd_rankings(args) -> int:
    from data_pipeline.rankings import AGREEMENT_FILE, ingest_rankings

    out = ingest_rankings(args.work_dir, list(args.rankings), method=args.method)
    agreement = json.loads((Path(args.work_dir) / AGREEMENT_FILE).read_text())
    print(f"rankings -> {out}\nagreement: {json.dumps(agreement)}")
    return 0


def _cmd_annotate(args) -> int:
    from data_pipeline.annotate import AnnotateConfig, serve

    names = ("annotator", "host", "port", "key", "key_env", "log_level")
    config = AnnotateConfig(
        work_dir=args.work_dir, **{k: getattr(args, k) for k in names if hasattr(args, k)}
    )
    print(f"annotate: open {config.url()} (Ctrl+C stops; every submitted ranking is on disk)")
    sys.stdout.flush()
    serve(config)
    return 0


def _cmd_pairs(args) -> int:
    from data_pipeline.pairs import LabelRule, build_pairs

    rule = LabelRule(
        top_k=args.top_k,
        bottom_k=args.bottom_k,
        ties=args.ties,
        template=args.template,
        prompt_field=args.prompt_field,
    )
    print(f"pairs -> {build_pairs(args.work_dir, rule, edit_pairs=args.edit_pairs)}")
    return 0


def _cmd_reasons(args) -> int:
    from data_pipeline.pairs import read_pairs
    from data_pipeline.reasons import REASONS_FILE, OpenAITeacher, annotate_reasons

    if args.teacher == "openai":
        if not args.base_url or not args.model:
            print("reasons: --teacher openai needs --base-url and --model", file=sys.stderr)
            return 2
        teacher = OpenAITeacher(
            args.base_url,
            args.model,
            api_key=os.environ.get(args.api_key_env, "EMPTY"),
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            timeout=args.timeout,
        )
        load_images = True
    else:
        from data_pipeline.pipeline import synthetic_teacher

        teacher = synthetic_teacher(args.work_dir)
        load_images = False
    stats = annotate_reasons(
        read_pairs(args.work_dir),
        teacher,
        Path(args.work_dir) / REASONS_FILE,
        image_root=args.work_dir,
        concurrency=args.concurrency,
        max_attempts=args.max_attempts,
        backoff_s=args.backoff,
        load_images=load_images,
        progress=not args.no_progress,
    )
    print(f"reasons: {json.dumps(stats.as_dict())}")
    return 0 if stats.failed == 0 else 1


def _cmd_export(args) -> int:
    from data_pipeline.export import ExportConfig, export_dataset

    config = ExportConfig(
        test_fraction=args.test_fraction,
        seed=args.seed,
        require_reasons=not args.allow_missing_reasons,
        llamafactory=not args.no_llamafactory,
        consistency_rank=not args.no_consistency_rank,
    )
    print(f"export -> {export_dataset(args.work_dir, args.out, config)}")
    return 0


def _cmd_stats(args) -> int:
    from data_pipeline.stats import format_table, write_stats

    print(format_table(write_stats(args.work_dir, args.export_dir)))
    return 0


def _cmd_probe(args) -> int:
    from data_pipeline.probe import leakage_probe

    dataset = args.dataset or Path(args.work_dir) / "export" / "hf"
    report = leakage_probe(dataset)
    width = max(len(k) for k in report)
    for key, value in report.items():
        print(
            f"{key.ljust(width)}  {value:.4f}"
            if isinstance(value, float)
            else f"{key.ljust(width)}  {value}"
        )
    return 0


def _synthetic_config(args):
    from data_pipeline.pipeline import SyntheticConfig

    return SyntheticConfig(
        n_prompts=args.prompts,
        grids_per_prompt=args.grids,
        layouts=args.layouts,
        panel_size=args.panel_size,
        annotators=args.annotators,
        noise=args.noise,
        grid_drift=args.grid_drift,
        panel_break=args.panel_break,
        pose=args.pose,
        seed=args.seed,
    )


def _cmd_synthetic(args) -> int:
    from data_pipeline.pipeline import make_synthetic_inputs

    paths = make_synthetic_inputs(args.work_dir, _synthetic_config(args))
    print(f"synthetic prompts -> {paths['prompts']}\nsynthetic grids -> {paths['grids']}")
    return 0


def _cmd_simulate(args) -> int:
    from data_pipeline.pipeline import simulate_rankings

    print(f"simulated rankings -> {simulate_rankings(args.work_dir, args.out)}")
    return 0


def _cmd_demo(args) -> int:
    from data_pipeline.pipeline import run_synthetic
    from data_pipeline.stats import format_table

    print(format_table(run_synthetic(args.work_dir, _synthetic_config(args))))
    return 0


def _add_synthetic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", type=int, default=12, help="number of synthetic prompts")
    p.add_argument("--grids", type=int, default=4, help="grids per prompt")
    p.add_argument("--layouts", nargs="+", default=["2x2"], help="layouts, e.g. 2x2 1x4 2x3")
    p.add_argument("--panel-size", type=int, default=64, help="panel side in pixels")
    p.add_argument("--annotators", type=int, default=3, help="simulated annotators")
    p.add_argument("--noise", type=float, default=0.08, help="annotator noise (std)")
    p.add_argument(
        "--grid-drift", type=float, default=0.1, help="probability a grid drifts (1 attribute)"
    )
    p.add_argument(
        "--panel-break", type=float, default=0.2, help="probability a panel breaks 2-3 attributes"
    )
    p.add_argument("--pose", action="store_true", help="vary the character's place and size")
    p.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    """The ``paco-data`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="paco-data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, func, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("work_dir", type=Path, help="the pipeline's work folder")
        p.set_defaults(func=func)
        return p

    p = add("prompts", _cmd_prompts, "stage 1: read T2IS-style prompts")
    p.add_argument("--input", type=Path, required=True, help="T2IS-style prompt JSONL")
    p.add_argument("--limit", type=int, default=None, help="keep the first N prompts")
    p.add_argument("--source", default="t2is", help="source tag of the prompts")

    p = add("grids", _cmd_grids, "stage 2: ingest or generate grids and cut panels")
    p.add_argument("--from", dest="from_dir", type=Path, help="folder of <prompt_id>/<seed>.png")
    p.add_argument("--min-grids", type=int, default=2, help="skip prompts with fewer grids")
    p.add_argument("--pipeline", help="diffusers pipeline folder or id to generate with")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--steps", type=int, default=28, help="num_inference_steps")
    p.add_argument("--guidance-scale", type=float, default=3.5)
    p.add_argument("--max-sequence-length", type=int, default=None)
    p.add_argument("--height", type=int, default=None)
    p.add_argument("--width", type=int, default=None)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default=None)

    p = add("instances", _cmd_instances, "stage 3: ranking instances by sub-figure pairing")
    p.add_argument(
        "--rule", default="other_grid", choices=["other_grid", "all_other_grids", "same_position"]
    )
    p.add_argument("--max-candidates", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shuffle", action="store_true", help="shuffle candidate order (seeded)")

    p = add("annotate", _cmd_annotate, "stage 4 by hand: rank the instances in a browser")
    from data_pipeline.annotate.config import AnnotateConfig

    # Only the options given reach AnnotateConfig; its fields hold the defaults and the help.
    help_of = {f.name: f.metadata["help"] for f in dataclasses.fields(AnnotateConfig)}
    for name, kind in (("annotator", str), ("host", str), ("port", int), ("key", str),
                       ("key_env", str), ("log_level", str)):  # fmt: skip
        p.add_argument(
            f"--{name.replace('_', '-')}", type=kind, default=argparse.SUPPRESS, help=help_of[name]
        )

    p = add("rankings", _cmd_rankings, "stage 4: ingest and merge rankings")
    p.add_argument(
        "rankings",
        type=Path,
        nargs="*",
        help="ranking JSONL file(s); the work folder's annotations.jsonl is always merged too",
    )
    p.add_argument("--method", default="borda", choices=["borda", "majority"])

    p = add("pairs", _cmd_pairs, "stage 5: rankings -> Yes/No pairs")
    p.add_argument("--top-k", type=int, default=1)
    p.add_argument("--bottom-k", type=int, default=1)
    p.add_argument(
        "--ties",
        choices=["drop", "all", "first"],
        default="drop",
        help="a tie at the top-k/bottom-k boundary: drop that side (paper), take the whole "
        "group, or take its first candidates",
    )
    p.add_argument("--template", default="consistency")
    p.add_argument("--prompt-field", default="theme")
    p.add_argument("--edit-pairs", type=Path, default=None, help="editing pairs JSONL to add")

    p = add("reasons", _cmd_reasons, "stage 6: a teacher's reason for every pair")
    p.add_argument("--teacher", default="template", choices=["template", "openai"])
    p.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://host:8000/v1"
    )
    p.add_argument("--model", default=None, help="model name served by the endpoint")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="env variable holding the key")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-attempts", type=int, default=4)
    p.add_argument("--backoff", type=float, default=0.5, help="first back-off delay (s)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.3)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--no-progress", action="store_true")

    p = add("export", _cmd_export, "stage 7: DatasetDict, parquet, LLaMA-Factory, ConsistencyRank")
    p.add_argument("--out", type=Path, default=None, help="export folder (default WORK/export)")
    p.add_argument("--test-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allow-missing-reasons", action="store_true")
    p.add_argument("--no-llamafactory", action="store_true")
    p.add_argument("--no-consistency-rank", action="store_true")

    p = add("stats", _cmd_stats, "stage 8: statistics (JSON + table)")
    p.add_argument("--export-dir", type=Path, default=None)

    p = add("probe", _cmd_probe, "label-leakage probe of the exported dataset (test AUCs)")
    p.add_argument(
        "--dataset", type=Path, default=None, help="saved DatasetDict (default WORK/export/hf)"
    )

    p = add("synthetic", _cmd_synthetic, "write synthetic prompts and grids (SYNTHETIC data)")
    _add_synthetic_args(p)
    p = add("simulate-rankings", _cmd_simulate, "rankings by simulated annotators (SYNTHETIC)")
    p.add_argument("--out", type=Path, default=None)
    p = add("demo", _cmd_demo, "every stage on the synthetic world")
    _add_synthetic_args(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``paco-data``; returns the exit status."""
    from paco_reward.errors import PacoError

    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except (PacoError, FileNotFoundError, ValueError) as err:
        print(f"paco-data {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
