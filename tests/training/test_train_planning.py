"""``paco-reward plan``: the paper's SFT recipe planned from Qwen2.5-VL-7B's real
architecture on 8 processes under ZeRO-2, its LoRA counted here from the config's widths."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from paco_reward.architectures import model_config
from paco_reward.planning import GiB


def _lora_parameters(config: dict, r: int) -> int:
    """r x (in + out) of every linear layer of the language model (the recipe's targets)."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)]
    return config["num_hidden_layers"] * sum(r * (i + o) for i, o in shapes)


def test_the_paper_recipe_planned_on_eight_80_gb_gpus_with_zero2():
    cmd = [sys.executable, "-m", "paco_reward.cli", "plan", "recipes/paco_reward_7b_lora.yaml",
           "--num_processes", "8", "--gpu_memory_gb", "80", "--sharded", "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout)
    parts = {c["name"]: c for c in plan["components"]}
    model = parts["model (Qwen2_5_VLForConditionalGeneration)"]
    assert model["parameters"] == pytest.approx(8.29e9, rel=0.01)
    assert model["bytes"] == 2 * model["parameters"]  # bfloat16

    lora = _lora_parameters(model_config("Qwen/Qwen2.5-VL-7B-Instruct"), r=32)
    assert parts["LoRA parameters"]["parameters"] == lora
    assert parts["gradients"]["parameters"] == lora // 8  # ZeRO-2: one shard per process
    assert parts["AdamW states"]["bytes"] == 2 * 4 * lora // 8
    (activations,) = [c for c in plan["components"] if c["kind"] == "activations"]
    assert "2,097,152 px" in activations["note"] and activations["bytes"] > 0
    assert plan["pairs_per_optimizer_step"] == 8 * 8 * 4
    assert plan["fits"] is (plan["per_process_bytes"] <= 80 * GiB)


def test_an_unknown_model_is_named():
    cmd = [sys.executable, "-m", "paco_reward.cli", "plan", "recipes/paco_reward_7b_lora.yaml",
           "--model_name_or_path", "org/not-a-model"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "'org/not-a-model'" in proc.stderr and "local folder" in proc.stderr
