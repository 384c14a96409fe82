"""A failing reward stops the run: what becomes NaN, the epoch's failure budget, and a real
``paco-reward serve`` killed under a training run on one and two processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from paco_grpo import RewardFailureError
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.rewards import BaseReward, ConsistencyReward, PanelColourAgreementReward
from paco_grpo.testing.flux import build_tiny_flux
from paco_reward import PacoReward
from paco_reward.errors import ConfigError
from paco_reward.server import ServerConfig, ServerProcess, ServerThread, create_app

RECIPE = "recipes/grpo_tiny_cpu.yaml"
GRID = "FOUR-PANEL Images with a 2x2 grid layout. A red fox. [TOP]-[LEFT]: sleeping."


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)


def _config(flux_dir, out, **overrides) -> GRPOConfig:
    small = {
        "model_name_or_path": str(flux_dir),
        "output_dir": str(out),
        "report_to": [],
        "num_train_epochs": 2,
        "prompts_per_epoch": 2,
        "num_generations": 4,
        "sample_batch_size": 4,
        "per_device_train_batch_size": 8,
        "num_iterations": 1,
        "save_epochs": 1,
        "test.eval_epochs": 0,
        "num_sample_images": 0,
    }
    return GRPOConfig.from_yaml(RECIPE, {**small, **overrides})


class _BrokenService(BaseReward):
    """A reward whose every item fails the way a dead service's do: NaN, with a reason."""

    name = "panel_colour_agreement"

    def score(self, images, prompts, metadata):
        for k in range(len(images)):
            self.fail(k, "the judge at http://judge:8000/v1 is gone")
        return np.full(len(images), np.nan)


def test_a_reward_that_fails_every_item_stops_the_first_epoch_before_training(flux_dir, tmp_path):
    trainer = GRPOTrainer(
        _config(flux_dir, tmp_path), rewards={"panel_colour_agreement": _BrokenService()}
    )
    before = [p.detach().clone() for p in trainer.params]
    with pytest.raises(RewardFailureError) as caught:
        trainer.train()
    err = caught.value
    assert (err.reward, err.num_failed, err.num_samples, err.epoch) == (
        "panel_colour_agreement", 8, 8, 1
    )  # fmt: skip
    # the first five reasons (two sampling calls of four images)
    assert err.reasons == [
        f"images[{k}]: the judge at http://judge:8000/v1 is gone" for k in (0, 1, 2, 3, 0)
    ]
    message = str(err)
    assert "Reward 'panel_colour_agreement' failed on 8 of 8 samples of epoch 1" in message
    assert "http://judge:8000/v1" in message and "No checkpoint was written yet" in message
    # no optimizer step, no checkpoint, no logged epoch
    assert trainer.global_step == 0 and trainer.history == []
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params))
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())
    assert isinstance(err, RuntimeError)  # and a PacoError: one except for a whole job


def test_max_failed_fraction_is_validated(flux_dir, tmp_path):
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match=rf"max_failed_fraction must be in \[0, 1\].*{bad}"):
            _config(flux_dir, tmp_path, max_failed_fraction=bad)


def test_a_shape_bug_in_a_reward_propagates_instead_of_scoring_nan():
    """A two-channel image is a caller's bug (the contract is CHW RGB): the old catch-all
    turned numpy's reshape ValueError into a quiet NaN."""
    reward = PanelColourAgreementReward()
    with pytest.raises(ValueError, match="cannot reshape"):
        reward([torch.rand(2, 32, 32)], [GRID], [{}])
    assert reward.num_failed == 0
    # an input the reward cannot read is still a NaN item, with its reason
    scores = reward([torch.rand(3, 32, 32), "/no/such/image.png"], [GRID, GRID], [{}, {}])
    assert np.isfinite(scores[0]) and np.isnan(scores[1])
    assert reward.pop_failure_reasons() == [
        "images[1]: InvalidImageError: images[1]: no image file at '/no/such/image.png'."
    ]


def test_a_server_that_stays_down_scores_the_batch_nan_naming_its_url(tiny_reward):
    app = create_app(tiny_reward.backend, ServerConfig("tiny"))
    server = ServerThread(app).start()
    remote = PacoReward.from_server(
        server.base_url, "tiny", retries=1, backoff=0.01, seed=0, cache_size=0
    )
    reward = ConsistencyReward(remote)
    grids = [torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    alive = reward(grids, [GRID] * 3, [{}] * 3)
    assert np.isfinite(alive).all()
    server.stop()
    for scores in (
        reward(grids, [GRID] * 3, [{}, {}, {"layout": "1x1"}]),
        asyncio_run(reward.acall(grids, [GRID] * 3, [{}] * 3)),
    ):
        assert np.isnan(scores).all()
    reasons = reward.pop_failure_reasons()
    assert reasons[0].startswith(
        "images[2]: PromptError: a 1x1 layout"
    )  # the input failure, on its own
    assert reasons[1].startswith("2 images: RewardServerError: The reward server at ")
    assert server.base_url in reasons[1] and "after 2 attempts" in reasons[1]
    assert reasons[2].startswith("3 images: RewardServerError") and reward.num_failed == 6


def asyncio_run(coroutine):
    import asyncio

    return asyncio.run(coroutine)


# ---------------------------------------------------------------- a real server, killed
def _train_command(nproc: int, flux_dir: Path, out: Path, url: str, *extra: str) -> list[str]:
    kwargs = {"consistency": {"model": "tiny", "server_url": url, "layout": "2x2",
                              "retries": 1, "backoff": 0.05}}  # fmt: skip
    flags = {
        "--model_name_or_path": str(flux_dir), "--output_dir": str(out),
        "--rewards": "{consistency: 1.0}", "--reward_kwargs": json.dumps(kwargs),
        "--aggregator": "weighted_sum", "--num_train_epochs": "3", "--prompts_per_epoch": "2",
        "--num_generations": "4", "--sample_batch_size": "4",
        "--per_device_train_batch_size": str(8 // nproc), "--num_iterations": "1",
        "--save_epochs": "1", "--test.eval_epochs": "0", "--num_sample_images": "0",
        "--report_to": "none",
    }  # fmt: skip
    argv = ["train", RECIPE, *(x for kv in flags.items() for x in kv), *extra]
    if nproc == 1:
        return [sys.executable, "-m", "paco_grpo.cli", *argv]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(nproc),
            "-m", "paco_grpo.cli", *argv]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.getcwd()}  # fmt: skip


def _checkpoints(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*[0-9]"))


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_killing_the_reward_server_stops_the_run_and_resume_finishes_it(
    nproc, flux_dir, tiny_model_dir, tmp_path
):
    """The server is SIGKILLed once epoch 0 is checkpointed. Every process stops with the
    typed error in the next epoch (no rank hangs) and nothing is saved for it; once the
    server is back, the run resumes from checkpoint-1 and finishes."""
    out = tmp_path / "run"
    server = ServerProcess(tiny_model_dir, args=["--served-model-name", "tiny"]).start()
    try:
        run = subprocess.Popen(_train_command(nproc, flux_dir, out, server.base_url),
                               env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
        deadline = time.monotonic() + 300
        while not _checkpoints(out) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill()  # SIGKILL once epoch 0 is checkpointed: in-flight requests are cut
        killed_after = len(_checkpoints(out))
        assert killed_after == 1, "epoch 1 did not finish; the test proves nothing"
        _, stderr = run.communicate(timeout=300)  # a hung rank would time out here
        assert run.returncode != 0, stderr[-3000:]

        # every process stopped with the typed error, in the epoch after the kill
        # (at the latest the next one, if the kill came after that epoch's rewards)
        stops = [line for line in stderr.splitlines() if "paco-grpo: error: Reward" in line]
        assert len(stops) == nproc, stderr[-3000:]
        for line in stops:
            assert "Reward 'consistency' failed on" in line and server.base_url in line, line
            assert "RewardServerError" in line and "--resume_from_checkpoint latest" in line
        stopped_at = int(stops[0].split("samples of epoch ")[1].split()[0])
        # epochs count from 1: stopping in epoch n leaves the n - 1 finished ones saved
        assert stopped_at in (killed_after + 1, killed_after + 2), stops[0]
        assert len(_checkpoints(out)) == stopped_at - 1  # nothing saved for the failed epoch

        # the server comes back on its port; the run resumes from its last checkpoint
        server.start()
        resumed = subprocess.run(
            _train_command(nproc, flux_dir, out, server.base_url,
                           "--resume_from_checkpoint", "latest"),
            env=_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in rows] == [1, 2, 3]
        assert all(np.isfinite(r["reward/consistency/mean"]) for r in rows)
        assert _checkpoints(out)[-1] == "checkpoint-00003"
    finally:
        server.stop()
