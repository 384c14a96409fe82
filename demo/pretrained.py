"""The demo's pretrained models, and their pretraining in the background. Not PaCo.

A real run downloads what the demo's tiny models must first learn: the stand-in for
Qwen2.5-VL (stage ``standin``), the world's generator (``generator``), its editor and its
CLIP (``world_edit``, ``world_grpo``). Each function here returns one of them for a demo
seed, trained when missing and cached per machine (:func:`demo.context.cache_dir`); every
stage asks for them through these functions.

None of them depends on a stage's output, so ``python -m demo`` first starts
:func:`start_background`: two worker processes (``python -m demo.pretrained``, one torch
thread each) pretrain the models the chosen stages need while the stages run. A stage that
asks for a model a worker is still building waits for it (the build lock of
:mod:`demo.cached_folder`) and then reuses it. On two cores this overlaps the
generator's 12 minutes with the evaluator's stages. The workers always use one thread: a
model's numbers depend on the thread count it was trained with.

The generator is a first run's longest pretraining: every world stage waits for it, and it
is serial. So everything else runs below it (:data:`NICENESS`): the other worker, and after
:func:`yield_to_generator` the demo's own process and its stages, the SFT's torchrun ranks
included (:mod:`demo.keep_priority`). The scheduler then gives the generator a core of its
own; priorities change no number.

    python -m demo.pretrained --seed 0 --models generator editor   # one worker, by hand
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from demo.context import cache_dir, make_reproducible
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError

# The editor's pretraining (EditorConfig fields other than the seed; the defaults in the demo).
EDITOR_CONFIG: dict = {}


def standin(seed: int) -> Path:
    """The stand-in Qwen2.5-VL for the world of the data stage (``DATA_CONFIG``)."""
    from data_pipeline.pipeline import SyntheticConfig
    from demo.stage_data import DATA_CONFIG
    from demo.stage_standin import standin_model

    return standin_model(seed, SyntheticConfig(**DATA_CONFIG, seed=seed).world())


def generator(seed: int) -> Path:
    """The world's generator, a ``FluxPipeline`` folder (:mod:`demo.world_generator`)."""
    from demo.world_generator import GeneratorConfig, pretrain_world_generator

    config = GeneratorConfig(seed=seed)
    return pretrain_world_generator(cache_dir() / "generator" / config.key(), config)


def editor(seed: int, generator_path: Path | None = None) -> Path:
    """The world's editor, a ``FluxKontextPipeline`` folder pretrained from the generator
    (``generator_path``, default :func:`generator`'s) (:mod:`demo.world_editor`)."""
    from demo.world_editor import EditorConfig, pretrain_world_editor

    generator_path = generator_path or generator(seed)
    config = EditorConfig(seed=seed, **EDITOR_CONFIG)
    return pretrain_world_editor(
        cache_dir() / "editor" / config.key(generator_path), generator_path, config
    )


def world_clip(seed: int) -> Path:
    """The world's CLIP, a ``CLIPModel`` folder (:mod:`demo.world_clip`)."""
    from demo.world_clip import WorldClipConfig, pretrain_world_clip

    config = WorldClipConfig(seed=seed)
    return pretrain_world_clip(cache_dir() / "world_clip" / config.key(), config)


MODELS = {"standin": standin, "generator": generator, "editor": editor, "world_clip": world_clip}
# What each stage asks for.
NEEDS = {
    "standin": ("standin",),
    "train": ("standin",),
    "generator": ("generator",),
    "world_evaluator": ("generator",),
    "world_grpo": ("generator", "world_clip"),
    "world_t2is": ("generator", "world_clip"),
    "world_hacking": ("generator", "world_clip"),
    "world_edit": ("generator", "editor", "world_clip"),
}
# The two workers' queues, in order: the editor starts from the generator; the stand-in is
# needed first, by the train stage, whose SFT shares that worker's core; the world's CLIP is
# needed last, by world_grpo, so it waits for the generator's core to be free.
QUEUES = (("generator", "editor", "world_clip"), ("standin",))
# Niceness of every process but the generator's worker (see the module's docstring).
NICENESS = 10


@dataclass
class Worker:
    """A background pretraining: its process, its models and its log."""

    process: subprocess.Popen
    models: list[str]
    log: Path


def plan(stages: list[str]) -> list[list[str]]:
    """The workers' queues for ``stages``: what they need, in :data:`QUEUES` order."""
    needed = {model for stage in stages for model in NEEDS.get(stage, ())}
    queues = [[m for m in queue if m in needed] for queue in QUEUES]
    return [queue for queue in queues if queue]


def niceness(models: list[str]) -> int:
    """How far below the demo's starting priority the worker of ``models`` runs: not at all
    for the generator's, :data:`NICENESS` for any other."""
    return 0 if "generator" in models else NICENESS


def start_worker(models: list[str], seed: int, log_dir: Path) -> Worker:
    """Start one worker that pretrains ``models`` in order (log: ``<log_dir>/<models>.log``),
    at its :func:`niceness`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{'_'.join(models)}.log"
    command = [sys.executable, "-m", "demo.pretrained", "--seed", str(seed)]
    command += ["--niceness", str(niceness(models)), "--models"]
    with open(log, "w") as handle:
        process = subprocess.Popen(
            command + models,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    print(f"Pretraining {', '.join(models)} in the background (log: {log}).")
    return Worker(process, models, log)


def start_background(stages: list[str], seed: int, log_dir: Path) -> list[Worker]:
    """Start the workers that pretrain what ``stages`` need (:func:`plan`)."""
    return [start_worker(models, seed, log_dir) for models in plan(stages)]


def yield_to_generator(workers: list[Worker]) -> None:
    """Lower this process (and the stages' subprocesses it starts) by :data:`NICENESS` if one
    of ``workers`` keeps the demo's priority (:func:`niceness`: the generator's). For good:
    a process cannot raise its priority again, so only ``python -m demo`` calls this."""
    if any(niceness(worker.models) == 0 for worker in workers):
        os.nice(NICENESS)


def stop_background(workers: list[Worker]) -> None:
    """Stop the workers still running (a model they had not finished is discarded: only
    finished ones are published) and say which failed (its stage trained the model)."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.terminate()
            worker.process.wait()
            print(f"Stopped the unused background pretraining of {', '.join(worker.models)}.")
        elif worker.process.returncode != 0:
            print(
                f"The background pretraining of {', '.join(worker.models)} failed "
                f"(exit {worker.process.returncode}); see {worker.log}."
            )


@dataclass
class PretrainArguments:
    """Pretrain the demo's models for a seed, in order, with one torch thread."""

    models: list[str] = config_field(help=f"Models to pretrain, of {list(MODELS)}.")
    seed: int = config_field(0, help="The demo seed.")
    niceness: int = config_field(0, help="Run this much below the starting priority.")

    def __post_init__(self) -> None:
        unknown = [m for m in self.models if m not in MODELS]
        if unknown:
            raise ConfigError(f"unknown model(s) {unknown}; the models are {list(MODELS)}.")
        if self.niceness < 0:
            raise ConfigError(f"niceness={self.niceness}: a worker can only lower its priority.")


def pretrain(args: PretrainArguments) -> int:
    import torch

    os.nice(args.niceness)
    make_reproducible(args.seed, threads=1)
    for name in args.models:
        start = time.perf_counter()
        path = MODELS[name](args.seed)
        seconds = time.perf_counter() - start
        print(
            f"{name}: {path} ({seconds:.0f} s, {torch.get_num_threads()} thread, "
            f"niceness {os.nice(0)})",
            flush=True,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m demo.pretrained``; returns the exit status."""
    command = Command("pretrained", PretrainArguments, pretrain, "Pretrain the demo's models.")
    return run_cli("python -m demo.pretrained", __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
