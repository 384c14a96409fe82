"""The 7B SFT recipe launched on 8 processes, on CPU, with its batch arithmetic unchanged.

The recipe's own launch, ``recipes/accelerate/sft_zero2.yaml``, cannot run here: DeepSpeed
needs an accelerator (and is not installed on a CPU machine); accelerate's FSDP plugin is
only applied on accelerators too. So the recipe is launched with the same process count as
plain data parallelism (``multi_gpu.yaml`` under ``ACCELERATE_USE_CPU=1``): 8 processes x
``per_device_train_batch_size`` 8 x ``gradient_accumulation_steps`` 4 = 256 pairs per
optimizer step. Only the model (tiny), the data (the toy pairs), precision (fp32) and the
step count are overridden.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

RECIPE = "recipes/paco_reward_7b_lora.yaml"


def _env(cpu: bool) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    env.pop("ACCELERATE_USE_CPU", None)
    if cpu:
        env["ACCELERATE_USE_CPU"] = "1"
    return env


@pytest.mark.slow
def test_the_7b_recipe_trains_one_step_on_8_processes(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "accelerate.commands.launch",
           "--config_file", "recipes/accelerate/multi_gpu.yaml",
           "-m", "paco_reward.cli", "train", RECIPE,
           "--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out),
           "--dataset_path", "toy-colour-pairs", "--toy_train_size", "256",
           "--toy_test_size", "16", "--max_steps", "1", "--save_steps", "1",
           "--eval_steps", "1000", "--bf16", "false", "--report_to", "none",
           "--dataloader_num_workers", "0", "--save_merged", "false"]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(cpu=True), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (summary,) = [r for r in rows if "train_loss" in r]
    # one optimizer step over 8 processes x 8 pairs x 4 accumulated batches
    assert summary["step"] == 1 and math.isfinite(summary["train_loss"])
    assert round(summary["train_samples_per_second"] * summary["train_runtime"]) == 256
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1 and state["train_batch_size"] == 8
    assert (out / "adapter_model.safetensors").is_file()
    # the start-up plan, once (the main process), for the tiny model on 8 processes
    assert proc.stdout.count("| **per process** |") == 1
    assert "SFT on 8 process(es)" in proc.stdout


@pytest.mark.slow
def test_ranks_that_accelerate_runs_alone_are_refused(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "-m", "paco_reward.cli", "train", RECIPE,
           "--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out),
           "--dataset_path", "toy-colour-pairs", "--bf16", "false"]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(cpu=False), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert proc.stderr.count("The launcher started WORLD_SIZE=2 processes") == 2
    assert not out.exists()
