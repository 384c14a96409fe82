"""The benchmarks ``paco-eval`` knows: one :class:`Benchmark` per name.

A benchmark is a config dataclass (its command-line flags, see
:mod:`paco_reward.command_line`) and one function per stage (``generate``, ``judge``,
``report``); ``all`` runs the stages it has in that order. The built-in benchmarks are
listed in ``_BUILTIN`` as ``module:attribute`` and imported only when named, so
``paco-eval --help`` loads no model code; another package may add one with
:func:`register_benchmark`.

    >>> "t2is" in benchmark_names()
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from paco_eval.errors import BenchmarkNotFoundError

__all__ = ["EXTRA_STAGES", "STAGES", "Benchmark", "benchmark_names", "get_benchmark", "register_benchmark"]

# The order ``all`` runs them in.
STAGES = ("generate", "judge", "report")
# Stages a benchmark may have that ``all`` does not run (``plan``: memory before any load).
EXTRA_STAGES = ("plan",)

# name -> "module:attribute" of its Benchmark (add a line here for a new built-in benchmark).
_BUILTIN: dict[str, str] = {
    "t2is": "paco_eval.t2is.benchmark:BENCHMARK",
    "consistency_rank": "paco_eval.consistency_rank.benchmark:BENCHMARK",
    "edit_reward_bench": "paco_eval.edit_reward.benchmark:BENCHMARK",
    "gedit": "paco_eval.gedit.benchmark:BENCHMARK",
    "vcreward": "paco_eval.vcreward.benchmark:BENCHMARK",
}
_REGISTERED: dict[str, Benchmark] = {}


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's command: its config class and its stages.

    Args:
        name: the ``paco-eval`` name (``t2is``).
        help: one line for ``paco-eval --help``.
        config_cls: the dataclass of its flags (shared by every stage, so ``all`` takes
            them all), or a function returning it (a heavy import runs only when used).
        stages: stage name (of :data:`STAGES`, or :data:`EXTRA_STAGES`, which ``all`` does
            not run) -> ``run(config) -> exit code | None``.
        recipe: the stages first take a YAML file of the config's fields (``"optional"``: they
            may).

    Example:
        >>> from dataclasses import make_dataclass
        >>> b = Benchmark("toy", "a toy", make_dataclass("Toy", []), {"report": lambda c: 0})
        >>> b.stage_names()
        ['report', 'all']
    """

    name: str
    help: str
    config_cls: type | Callable[[], type]
    stages: Mapping[str, Callable[[Any], int | None]] = field(default_factory=dict)
    recipe: bool | str = False

    def __post_init__(self) -> None:
        unknown = sorted(set(self.stages) - set(STAGES) - set(EXTRA_STAGES))
        if unknown:
            raise ValueError(f"benchmark {self.name!r}: unknown stage(s) {unknown}; stages are "
                             f"{list(EXTRA_STAGES + STAGES)}.")  # fmt: skip

    def stage_names(self) -> list[str]:
        return [s for s in EXTRA_STAGES + STAGES if s in self.stages] + ["all"]

    def run_all(self, config: Any) -> int:
        """Run every stage in order; stop at the first that fails."""
        for stage in STAGES:
            if stage in self.stages:
                code = int(self.stages[stage](config) or 0)
                if code:
                    return code
        return 0


def register_benchmark(benchmark: Benchmark) -> Benchmark:
    """Make ``benchmark`` available as ``paco-eval NAME`` (a later one replaces an earlier)."""
    _REGISTERED[benchmark.name] = benchmark
    return benchmark


def benchmark_names() -> list[str]:
    """The names of the known benchmarks, sorted."""
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def get_benchmark(name: str) -> Benchmark:
    """The benchmark called ``name``.

    Raises:
        BenchmarkNotFoundError: when none is, listing those that are.
    """
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise BenchmarkNotFoundError(f"no benchmark {name!r}; known benchmarks: {benchmark_names()}.")
    module, _, attribute = _BUILTIN[name].partition(":")
    benchmark = getattr(importlib.import_module(module), attribute)
    _REGISTERED[name] = benchmark
    return benchmark
