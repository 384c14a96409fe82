"""The demo's background pretraining: each stage's models are pretrained by exactly one
worker, in an order a worker can follow; stages that need none start none; the worker's
command line refuses an unknown model; a worker reuses what is cached, in its own process
with one thread; and only the generator's worker keeps the demo's priority."""

from __future__ import annotations

import os
import subprocess
import sys

from demo import pretrained
from demo.__main__ import STAGES
from paco_reward.cached_folder import build_once


def test_every_model_a_stage_needs_has_exactly_one_worker():
    assert set(pretrained.NEEDS) <= set(STAGES)
    queued = [m for queue in pretrained.QUEUES for m in queue]
    assert sorted(queued) == sorted(pretrained.MODELS)  # each model in one queue, once
    needed = {m for models in pretrained.NEEDS.values() for m in models}
    assert needed == set(pretrained.MODELS)
    # The editor starts from the generator: the same worker builds the generator first.
    (queue,) = [q for q in pretrained.QUEUES if "editor" in q]
    assert queue.index("generator") < queue.index("editor")
    # Every stage that needs the editor also needs the generator (the editor's start).
    assert all("generator" in m for m in pretrained.NEEDS.values() if "editor" in m)


def test_the_workers_get_what_the_chosen_stages_need(tmp_path):
    assert pretrained.plan(STAGES) == [["generator", "editor", "world_clip"], ["standin"]]
    assert pretrained.plan(["data", "train"]) == [["standin"]]
    assert pretrained.plan(["world_grpo"]) == [["generator", "world_clip"]]
    assert pretrained.start_background(["scoring", "grpo"], 0, tmp_path / "logs") == []
    # The generator is the first run's critical path: its worker alone is not lowered.
    assert [pretrained.niceness(q) for q in pretrained.plan(STAGES)] == [0, pretrained.NICENESS]
    assert not (tmp_path / "logs").exists()


def test_the_worker_refuses_an_unknown_model():
    result = subprocess.run(
        [sys.executable, "-m", "demo.pretrained", "--models", "generator", "vae"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "unknown model(s) ['vae']" in result.stderr


def test_the_worker_refuses_to_raise_its_priority():
    result = subprocess.run(
        [sys.executable, "-m", "demo.pretrained", "--models", "world_clip", "--niceness", "-5"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "niceness=-5: a worker can only lower its priority" in result.stderr


def test_a_worker_reuses_the_cached_model_in_one_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("PACO_RL_CACHE", str(tmp_path / "cache"))
    # Stands in for a finished pretraining of the world's CLIP under the demo's key.
    from demo.world_clip import INFO_FILE, WorldClipConfig

    config = WorldClipConfig(seed=3)
    folder = tmp_path / "cache" / "world_clip" / config.key()
    build_once(folder, INFO_FILE, config.key(), lambda work: {"note": "built by the test"})

    worker = pretrained.start_worker(["world_clip"], 3, tmp_path / "logs")
    worker.process.wait(120)
    log = worker.log.read_text()
    assert worker.process.returncode == 0, log
    assert f"world_clip: {folder} (" in log and ", 1 thread, " in log
    # Not the generator's worker: it runs below the process that started it.
    below = min(os.nice(0) + pretrained.NICENESS, 19)
    assert f"niceness {below})" in log
    assert pretrained.world_clip(3) == folder  # the stage finds the same folder
    pretrained.stop_background([worker])
