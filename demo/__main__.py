"""Run the demo: ``python -m demo --output-dir demo_output`` (what ``make demo`` does)."""

from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path

from demo.context import DemoContext

STAGES = ["scoring", "data", "train", "server", "benchmarks", "grpo", "grpo_edit"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", type=Path, default=Path("demo_output"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stages", nargs="*", default=STAGES, choices=STAGES)
    args = parser.parse_args(argv)
    ctx = DemoContext(output_dir=args.output_dir, seed=args.seed)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for name in args.stages:
        start = time.perf_counter()
        print(f"\n##### stage: {name}")
        importlib.import_module(f"demo.stage_{name}").run(ctx)
        print(f"##### stage {name} done in {time.perf_counter() - start:.1f}s")
    print(f"\nDemo finished; artifacts in {args.output_dir}/")
    if "annotate_command" in ctx.artifacts:
        print(f"Rank the demo's instances in your browser: {ctx.artifacts['annotate_command']}")


if __name__ == "__main__":
    main()
