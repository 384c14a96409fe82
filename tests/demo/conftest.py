"""Fixtures of the world stages' tests: tiny world models, built once per session; the
evaluator test's background runs (test_demo_evaluator.py)."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from demo.context import DemoContext
from demo.world_clip import WorldClipConfig, pretrain_world_clip
from demo.world_generator import GeneratorConfig, pretrain_world_generator

TINY_GENERATOR = GeneratorConfig(prompts=12, grids_per_prompt=1, vae_steps=4, steps=4, batch_size=4)


@pytest.fixture(scope="session")
def tiny_world_models(tmp_path_factory, tiny_model_dir) -> dict:
    """A tiny world generator, the tiny evaluator and a tiny world CLIP, as the
    ``ctx.artifacts`` the world stages read."""
    root = tmp_path_factory.mktemp("world_models")
    return {
        "world_generator": pretrain_world_generator(root / "gen", TINY_GENERATOR, progress=False),
        "world_evaluator": tiny_model_dir,
        "world_clip": pretrain_world_clip(
            root / "clip", WorldClipConfig(steps=2, batch_size=4), progress=False
        ),
    }


@pytest.fixture
def world_ctx(tmp_path, tiny_world_models, monkeypatch) -> DemoContext:
    """A demo context holding the tiny world models, with its own model cache."""
    monkeypatch.setenv("PACO_RL_CACHE", str(tmp_path / "cache"))
    ctx = DemoContext(output_dir=tmp_path / "out")
    ctx.artifacts.update(tiny_world_models)
    return ctx


# The evaluator test (test_demo_evaluator.py): one run per seed of evaluator_run.py with
# prompts, stand-in steps, SFT steps (of 16 pairs), pixels per panel; the demo's are
# 288 / 1600 / 400 of 2 x 16 / 112 x 112.
EVALUATOR_RUN = Path(__file__).with_name("evaluator_run.py")
EVALUATOR_SCALE = os.environ.get("PACO_TEST_EVALUATOR_SCALE", "96 600 700 3136").split()
EVALUATOR_SEEDS = (0, 1)


def _low_priority() -> None:
    """In a run's process before it starts: niceness 10 (it yields to the tests of its own
    session, and of the other suites `make test` starts in that session), and, on Linux, death
    with the test process, however that ends (a `make test` that stops early kills it)."""
    os.nice(10)
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def start_evaluator_runs(folder: Path) -> list[subprocess.Popen]:
    """Both seeds' runs, started now at low priority (:func:`_low_priority`), output piped."""
    env = {
        **os.environ,
        "PYTHONPATH": str(EVALUATOR_RUN.parents[2]),
        "OMP_NUM_THREADS": "1",
        "PACO_RL_CACHE": str(folder / "cache"),
    }
    command = [sys.executable, str(EVALUATOR_RUN)]
    return [
        subprocess.Popen(
            [*command, str(folder / f"seed{seed}"), str(seed), *EVALUATOR_SCALE],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_low_priority,
        )
        for seed in EVALUATOR_SEEDS
    ]


EVALUATOR_TEST = (
    "test_demo_evaluator.py::test_the_evaluator_beats_pixel_similarity_and_clip_on_truth_pairs"
)
_EVALUATOR_RUNS = pytest.StashKey[tuple]()


def pytest_collection_finish(session):
    """When the evaluator test is selected: move it to the end of the session and start its
    two runs now, so they overlap every other test."""
    found = [item for item in session.items if item.nodeid.endswith(EVALUATOR_TEST)]
    if not found or session.config.option.collectonly:
        return
    session.items.remove(found[0])
    session.items.append(found[0])
    folder = Path(tempfile.mkdtemp(prefix="paco-evaluator-test-"))
    session.config.stash[_EVALUATOR_RUNS] = (folder, start_evaluator_runs(folder))


def pytest_unconfigure(config):
    folder, runs = config.stash.get(_EVALUATOR_RUNS, (None, []))
    for run in runs:
        if run.poll() is None:  # the session ended before the test collected them
            run.kill()
            run.wait()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def evaluator_runs(request) -> list:
    """The evaluator test's two runs, started when collection finished."""
    return request.config.stash[_EVALUATOR_RUNS][1]
