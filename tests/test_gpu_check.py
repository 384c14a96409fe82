"""``benchmarks.gpu_check`` at ``--scale`` on the CPU: the same code the one GPU run takes
(real architectures shrunk, random weights, the library's scoring and GRPO step), checked
for what it measures, so a broken path fails here and not on the lent GPU."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_check import _split, shrink_flux, shrink_qwen2_5_vl
from paco_grpo.architectures import pipeline_configs
from paco_reward.architectures import model_config

ROOT = Path(__file__).resolve().parents[1]
SCALE = 0.0625
BATCH_SIZES = [1, 2]


def run_check(out: Path, *flags: str) -> tuple[dict, str]:
    """The JSON results and the printed tables of a scaled run on the CPU, as a user runs it."""
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--scale", str(SCALE), "--device",
           "cpu", "--resolution", "64", "--json", str(out), *flags]  # fmt: skip
    # One thread: on these tiny matrices threads contend on a shared machine rather than help.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("gpu-check") / "gpu_check.json"
    return run_check(out, "--batch_sizes", *map(str, BATCH_SIZES), "--repeats", "2",
                     "--train_steps", "2")  # fmt: skip


@pytest.mark.slow
def test_scoring_rows(check):
    results, stdout = check
    scoring = results["scoring"]
    rows = [r for r in scoring["rows"] if r["engine"] == "transformers"]
    assert [r["batch_size"] for r in rows] == BATCH_SIZES
    for row in rows:
        assert math.isfinite(row["pairs_per_s"]) and row["pairs_per_s"] > 0
        assert len(row["scores"]) == row["batch_size"]
        assert all(0 < s < 1 for s in row["scores"])
        assert row["peak_memory_bytes"] is None  # not measured on a CPU, not faked
    scores = [s for r in rows for s in r["scores"]]
    assert len(set(scores)) > 1, scores  # a model that reads its inputs
    assert scoring["layers"] == {"text": 2, "vision": 2}
    assert scoring["image_tokens_per_image"] == 4  # 64 px -> 56 px: 4 x 4 patches, merged 2 x 2
    if importlib.util.find_spec("vllm") is None:
        assert {"engine": "vllm", "status": "not installed"} in scoring["rows"]
    else:  # .venv-vllm: the same pairs through backend="vllm", float32 on the CPU
        vllm_rows = [r for r in scoring["rows"] if r["engine"] == "vllm"]
        assert [r["batch_size"] for r in vllm_rows] == BATCH_SIZES, scoring["rows"]
        assert all(r["max_abs_diff_vs_transformers"] < 1e-4 for r in vllm_rows)
    assert "| transformers | 1 |" in stdout and "| transformers | 2 |" in stdout


@pytest.mark.slow
def test_training_step(check):
    results, stdout = check
    training = results["training"]
    assert training["batch_size"] == 4  # the recipe's per_device_train_batch_size
    assert training["layers"] == {"double": 1, "single": 2}
    assert training["image_tokens"] == 16  # 64 px: 8 x 8 latents packed 2 x 2
    assert training["gradient_checkpointing"] is True
    assert math.isfinite(training["loss"]) and all(map(math.isfinite, training["losses"]))
    assert math.isfinite(training["warm_up"]["grad_norm"]) and training["warm_up"]["grad_norm"] > 0
    # LoRA B starts at zero and weight decay alone keeps it there: the gradient moved it
    assert training["lora_changed"] and training["lora_b_max_abs_change"] > 0
    assert 0 < training["lora_parameters"] < training["parameters"]
    assert training["seconds_per_step"] > 0 and training["peak_memory_bytes"] is None
    assert training["measured_over_predicted"] is None
    assert "| s/step |" in stdout


@pytest.mark.slow
def test_prediction_next_to_measurement(check):
    results, _ = check
    predicted = results["training"]["predicted"]
    assert "components" in predicted, predicted
    assert predicted["components"]["activations"] > 0
    assert predicted["total_bytes"] == sum(predicted["components"].values()) > 0
    # the static parts are the built model's own
    components, training = predicted["components"], results["training"]
    assert components["adam_states"] == 2 * components["lora"] == 8 * training["lora_parameters"]


@pytest.mark.slow
def test_bf16_as_on_the_gpu(tmp_path):
    """The GPU's arithmetic on the CPU: bf16 weights, the recipe's bf16 autocast."""
    results, _ = run_check(tmp_path / "bf16.json", "--dtype", "bfloat16", "--batch_sizes", "2",
                           "--repeats", "1", "--train_steps", "1", "--no_vllm")  # fmt: skip
    scoring, training = results["scoring"], results["training"]
    assert scoring["dtype"] == "bfloat16" and all(0 < s < 1 for s in scoring["rows"][0]["scores"])
    assert (training["dtype"], training["mixed_precision"]) == ("bfloat16", "bf16")
    assert math.isfinite(training["loss"]) and training["lora_b_max_abs_change"] > 0


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25, 0.0625, 0.01])
def test_shrunk_architectures_keep_their_constraints(scale):
    qwen = shrink_qwen2_5_vl(model_config("X-GenGroup/PaCo-Reward-7B"), scale)
    head_dim = qwen["hidden_size"] // qwen["num_attention_heads"]
    assert qwen["hidden_size"] == qwen["num_attention_heads"] * head_dim
    assert qwen["num_attention_heads"] % qwen["num_key_value_heads"] == 0
    assert sum(qwen["rope_scaling"]["mrope_section"]) == head_dim // 2
    vision = qwen["vision_config"]
    assert vision["hidden_size"] % vision["num_heads"] == 0
    assert (vision["hidden_size"] // vision["num_heads"]) % 4 == 0  # 2-D rotary halves
    assert vision["out_hidden_size"] == qwen["hidden_size"]
    assert all(0 <= i < vision["depth"] for i in vision["fullatt_block_indexes"])
    flux = shrink_flux(pipeline_configs("black-forest-labs/FLUX.1-dev")["transformer"], scale)
    assert sum(flux["axes_dims_rope"]) == flux["attention_head_dim"]
    assert all(d > 0 and d % 2 == 0 for d in flux["axes_dims_rope"])
    assert flux["in_channels"] == 64
    if scale == 1.0:  # the GPU run builds exactly the shipped architectures
        assert qwen == model_config("X-GenGroup/PaCo-Reward-7B")
        assert flux == pipeline_configs("black-forest-labs/FLUX.1-dev")["transformer"]


def test_split_keeps_the_sum():
    assert _split([16, 24, 24], 16) == [4, 6, 6]
    assert _split([16, 56, 56], 32, multiple=2) == [4, 14, 14]
