"""``paco-eval BENCHMARK STAGE [--flags]``: run a benchmark's stages.

    paco-eval t2is judge --images_dir out/images --output_dir out/eval --data ChengyouJia/T2IS-Bench
    paco-eval t2is report --output_dir out/eval
    paco-eval t2is all ...                 # generate, judge, report in order
    python -m paco_eval t2is --help

STAGE is one of plan | generate | judge | report | all (the stages the benchmark has; all
runs generate, judge and report). Every flag is
a field of the benchmark's config dataclass, read as YAML (see
:mod:`paco_reward.command_line`, the dialect of every ``paco-*`` command). Exit codes: 0
done, 1 an error (one line naming the input; ``-v`` shows the traceback), 2 a usage error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from paco_eval.registry import benchmark_names, get_benchmark
from paco_reward.command_line import Command, run_cli

__all__ = ["main"]

_STAGE_HELP = {
    "plan": "Print the GPU memory of each model the stages load (before any loads).",
    "generate": "Generate the benchmark's images (skips those already made).",
    "judge": "Score the images (resumable: rows already in the results files are kept).",
    "report": "Write report.json and report.md from the results files.",
    "all": "Run every stage in order.",
}


def _usage() -> str:
    names = ", ".join(benchmark_names())
    return (
        "usage: paco-eval [-h] BENCHMARK STAGE [--flags]\n\n"
        f"{__doc__.splitlines()[0]}\n\nbenchmarks: {names}\n"
        "stages: [plan] | generate | judge | report | all\n"
        "`paco-eval BENCHMARK --help` lists a benchmark's stages and flags."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``paco-eval`` (and ``python -m paco_eval``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = [a for a in argv if a in ("-v", "-vv", "--verbose")]
    rest = [a for a in argv if a not in verbose]
    if not rest or rest[0] in ("-h", "--help"):
        print(_usage())
        return 0 if rest else 2
    name, stage_argv = rest[0], rest[1:]
    if name not in benchmark_names():
        print(_usage(), file=sys.stderr)
        print(f"paco-eval: error: no benchmark {name!r}; known: {benchmark_names()}", file=sys.stderr)
        return 2
    benchmark = get_benchmark(name)
    runs = dict(benchmark.stages, all=benchmark.run_all)
    commands = [
        Command(stage, benchmark.config_cls, runs[stage], _STAGE_HELP[stage], recipe=benchmark.recipe)
        for stage in benchmark.stage_names()
    ]
    return run_cli(f"paco-eval {name}", benchmark.help, commands, verbose + stage_argv)


if __name__ == "__main__":
    sys.exit(main())
