"""GRPO on two processes (torchrun + gloo on CPU) against one: the learning-rate schedule
per optimizer step, and resuming a two-process checkpoint bit for bit on both ranks (also
with GARDO's reference adapter, its resets and the diversity-aware advantage)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.testing.features import build_tiny_dinov3
from paco_grpo.testing.flux import build_tiny_flux

RECIPE = "recipes/grpo_tiny_cpu.yaml"
HELPER = str(Path(__file__).with_name("grpo_ranks.py"))


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    return build_tiny_flux(tmp_path_factory.mktemp("tiny-flux") / "flux", seed=0)


def _run(nproc: int, out: Path, **overrides) -> list[dict]:
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.getcwd()}  # fmt: skip
    pairs = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    if nproc == 1:
        cmd = [sys.executable, HELPER, RECIPE, str(out), *pairs]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               HELPER, RECIPE, str(out), *pairs]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(nproc)]


def _common(flux_dir, out: Path) -> dict:
    return {
        "model_name_or_path": str(flux_dir),
        "output_dir": str(out),
        "report_to": [],
        "num_train_epochs": 2,
        "prompts_per_epoch": 4,
        "num_generations": 4,
        "sample_batch_size": 8,
        "num_iterations": 2,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 2,
        "test.eval_epochs": 0,
        "num_sample_images": 0,
        "save_epochs": 1,
    }


@pytest.mark.slow
def test_two_processes_follow_the_one_process_lr_schedule_and_resume_bit_for_bit(
    flux_dir, tmp_path
):
    # same global batch: 16 samples per step on one process = 8 per process on two
    (one,) = _run(1, tmp_path / "one", **_common(flux_dir, tmp_path / "one"),
                  per_device_train_batch_size=16)  # fmt: skip
    two = _run(2, tmp_path / "two", **_common(flux_dir, tmp_path / "two"),
               per_device_train_batch_size=8)  # fmt: skip
    lrs_one = [lr for row in one["history"] for lr in row["train/lr_per_step"]]
    lrs_two = [lr for row in two[0]["history"] for lr in row["train/lr_per_step"]]
    assert len(lrs_one) == 4 and lrs_one[0] == 0.0 and max(lrs_one) > 0  # warm-up, then decay
    assert lrs_two == pytest.approx(lrs_one, rel=1e-12, abs=0)
    assert lrs_one[1] < lrs_one[2] > lrs_one[3]  # warm-up over 2 steps, then cosine decay

    # resume the two-process run from its epoch-1 checkpoint: epoch 2 again, bit for bit
    checkpoint = tmp_path / "two" / "checkpoints" / "checkpoint-00001"
    assert {p.name for p in checkpoint.glob("random_states_*.pkl")} == {
        "random_states_0.pkl",
        "random_states_1.pkl",
    }
    resumed = _run(2, tmp_path / "resumed", **_common(flux_dir, tmp_path / "resumed"),
                   per_device_train_batch_size=8,
                   resume_from_checkpoint=str(checkpoint))  # fmt: skip
    for rank in (0, 1):
        assert [r["epoch"] for r in resumed[rank]["history"]] == [2]
        assert resumed[rank]["history"][0] == two[rank]["history"][1], rank
        assert resumed[rank]["lora_sha256"] == two[rank]["lora_sha256"], rank
    assert two[0]["history"][1]["train/loss"] != two[1]["history"][1]["train/loss"]  # ranks differ

    # the run's saved config reloads as the config it ran with
    saved = GRPOConfig.from_yaml(tmp_path / "two" / "training_config.yaml")
    assert saved.per_device_train_batch_size == 8 and saved.lr_scheduler_type == "cosine"
    assert saved == GRPOConfig.from_yaml(
        RECIPE, {**_common(flux_dir, tmp_path / "two"), "per_device_train_batch_size": 8}
    )


@pytest.mark.slow
def test_two_processes_reset_checkpoint_and_resume_the_reference_adapter_bit_for_bit(
    flux_dir, tmp_path
):
    dino = build_tiny_dinov3(tmp_path / "dino")
    gardo = {"num_train_epochs": 3, "per_device_train_batch_size": 8, "beta": 0.05,
             "kl_reference": "adapter", "reference_reset_kl": 1e-12,
             "feature_model": str(dino), "diversity_advantage": True}  # fmt: skip
    two = _run(2, tmp_path / "two", **{**_common(flux_dir, tmp_path / "two"), **gardo})
    for rank in (0, 1):
        resets = [row["gardo/reference_reset"] for row in two[rank]["history"]]
        # epoch 0 trains at warm-up lr 0 (the policy stays the reference: KL 0); epoch 1's
        # steps move it, KL > 1e-12 marks a reset, done at epoch 2 (the resumed run too)
        assert resets == [0, 0, 1], (rank, resets)
    for row0, row1 in zip(two[0]["history"], two[1]["history"]):  # gathered: the same
        shared = [k for k in row0 if k.startswith(("hacking/", "gardo/", "reward/"))]
        assert {k: row0[k] for k in shared} == {k: row1[k] for k in shared}
    assert two[0]["reference_sha256"] == two[1]["reference_sha256"]
    checkpoint = tmp_path / "two" / "checkpoints" / "checkpoint-00002"
    assert (checkpoint / "reference_adapter.safetensors").is_file()
    assert (checkpoint / "gardo_state.json").is_file()
    resumed = _run(2, tmp_path / "resumed",
                   **{**_common(flux_dir, tmp_path / "resumed"), **gardo,
                      "resume_from_checkpoint": str(checkpoint)})  # fmt: skip
    for rank in (0, 1):
        assert [r["epoch"] for r in resumed[rank]["history"]] == [3]
        assert resumed[rank]["history"][0] == two[rank]["history"][2], rank
        assert resumed[rank]["lora_sha256"] == two[rank]["lora_sha256"], rank
        assert resumed[rank]["reference_sha256"] == two[rank]["reference_sha256"], rank
