"""The demo's background pretraining: each stage's models are pretrained by exactly one
worker, in an order a worker can follow; stages that need none start none; the worker's
command line refuses an unknown model; a worker reuses what is cached, in its own process
with one thread; and only the generator's worker keeps the demo's priority, the demo itself
running below it while it pretrains."""

from __future__ import annotations

import os
import subprocess
import sys

from demo import pretrained
from demo.__main__ import STAGES
from demo.cached_folder import build_once


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
    """For every choice of stages: each model those stages need is in one queue, once, and
    nothing else; the editor's queue builds the generator first; at most the workers there
    are cores for; one worker keeps the demo's priority exactly when the generator is
    needed (it is the one that builds it); stages that need nothing start no worker."""
    choices = [
        [s for i, s in enumerate(STAGES) if mask >> i & 1] for mask in range(2 ** len(STAGES))
    ]
    for stages in choices:
        queues = pretrained.plan(stages)
        needed = {m for stage in stages for m in pretrained.NEEDS.get(stage, ())}
        queued = [m for queue in queues for m in queue]
        assert sorted(queued) == sorted(needed) and all(queues), stages
        assert len(queues) <= len(pretrained.QUEUES)
        for queue in queues:
            if "editor" in queue:
                assert queue.index("generator") < queue.index("editor"), stages
        kept = [queue for queue in queues if pretrained.niceness(queue) == 0]
        assert kept == [queue for queue in queues if "generator" in queue], stages
        assert all(pretrained.niceness(q) > 0 for q in queues if q not in kept)
    assert pretrained.start_background(["scoring", "grpo"], 0, tmp_path / "logs") == []
    assert not (tmp_path / "logs").exists()


def test_the_demo_runs_below_the_generators_worker_only_while_there_is_one():
    """``yield_to_generator`` lowers the demo's own process (and so the stages it starts)
    when one of the workers builds the generator, and leaves it be otherwise."""
    code = (
        "import os; from demo import pretrained as p; "
        "worker = lambda models: p.Worker(None, models, None); "
        "p.yield_to_generator([worker(['standin'])]); before = os.nice(0); "
        "p.yield_to_generator([worker(['standin']), worker(['generator', 'editor'])]); "
        "print(before, os.nice(0))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    before, after = map(int, result.stdout.split())
    assert before == os.nice(0)  # this test's own niceness: unchanged
    assert after == min(before + pretrained.NICENESS, 19)


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
