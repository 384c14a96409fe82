"""Run the demo: ``python -m demo --output_dir demo_output`` (what ``make demo`` does)."""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from demo.context import DemoContext, make_reproducible
from demo.documented import PAGE, SITE_PAGE
from demo.pretrained import start_background, stop_background, yield_to_generator
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError

STAGES = [
    "scoring",
    "data",
    "standin",
    "train",
    "server",
    "benchmarks",
    "grpo",
    "grpo_edit",
    "generator",
    "world_evaluator",
    "world_grpo",
    "world_t2is",
    "world_hacking",
    "world_edit",
    "report",
]


@dataclass
class DemoArguments:
    """Every capability of paco-rl on tiny offline models and synthetic data."""

    output_dir: str = config_field("demo_output", help="Where every artifact goes.")
    seed: int = config_field(0, help="Seed of every stage.")
    threads: int = config_field(
        1,
        help="torch CPU threads of this process, fixed so that a rerun on the same machine gives "
        "the same numbers. One: the background pretraining and the stages' worker processes "
        "keep the other core busy, and a second thread beside them slows both down.",
    )
    stages: list[str] = config_field(lambda: list(STAGES), help=f"Stages to run, of {STAGES}.")

    def __post_init__(self) -> None:
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown:
            raise ConfigError(f"unknown stage(s) {unknown}; the stages are {STAGES}.")


def run(args: DemoArguments) -> int:
    make_reproducible(args.seed, args.threads)
    output_dir = Path(args.output_dir)
    ctx = DemoContext(output_dir=output_dir, seed=args.seed)
    output_dir.mkdir(parents=True, exist_ok=True)
    # The cached models the stages will ask for are pretrained meanwhile (demo.pretrained).
    workers = start_background(args.stages, args.seed, output_dir / "pretraining")
    yield_to_generator(workers)
    try:
        for name in args.stages:
            start = time.perf_counter()
            print(f"\n##### stage: {name}")
            importlib.import_module(f"demo.stage_{name}").run(ctx)
            seconds = time.perf_counter() - start
            ctx.artifacts.setdefault("stage_seconds", {})[name] = seconds
            print(f"##### stage {name} done in {seconds:.1f}s")
    finally:
        stop_background(workers)
    print(f"\nDemo finished; artifacts in {output_dir}/")
    if "annotate_command" in ctx.artifacts:
        print(f"Rank the demo's instances in your browser: {ctx.artifacts['annotate_command']}")
    print(summary(ctx.artifacts.get("report")))
    return 0


def summary(report: Path | None) -> str:
    """The last line: where this run's report is (``report``: None when the report stage did
    not run) and where the miniature study that documents its figures is."""
    where = f"this run's report: {report}" if report else "no report (the report stage writes it)"
    return (
        f"Figures: {where}; the miniature study they are measured against: {PAGE} "
        f"(on the docs site, `make docs`: {SITE_PAGE})."
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m demo``; returns the exit status."""
    command = Command("demo", DemoArguments, run, "Run the demo.")
    return run_cli("python -m demo", __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
