"""``paco-reward plan``: the paper's SFT recipe planned from Qwen2.5-VL-7B's real
architecture on 8 processes under ZeRO-2, its LoRA counted here from the config's widths;
the Qwen3-VL-8B recipe's LoRA targets exist in Qwen3-VL-8B's real architecture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paco_reward.architectures import model_config
from paco_reward.planning import GiB

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _lora_parameters(config: dict, r: int) -> int:
    """r x (in + out) of every linear layer of the language model (the recipe's targets)."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    head = config.get("head_dim", h // config["num_attention_heads"])
    q, kv = config["num_attention_heads"] * head, config["num_key_value_heads"] * head
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]
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


def test_the_qwen3_vl_recipe_adapts_layers_its_real_architecture_has():
    """Qwen3-VL-8B-Instruct (its published config, on the meta device): every LoRA target
    of the recipe is a linear layer of each of its 36 decoder layers, and the plan counts
    the model, the LoRA and 32 x 32 pixels a vision token (on 2 nodes of 4 processes)."""
    import torch
    from peft import get_peft_model

    from paco_reward.architectures import build_empty
    from paco_reward.training.cli import load_recipe
    from paco_reward.training.loading import lora_config
    from paco_reward.training.planning import plan_sft

    cfg = load_recipe(RECIPES / "paco_reward_qwen3_vl_8b_lora.yaml", ["--use_cpu", "true"])
    architecture = model_config(cfg.model_name_or_path)
    with torch.device("meta"):
        model = build_empty(architecture)
        model = get_peft_model(model, lora_config(cfg, model))
    text = architecture["text_config"]
    for name in cfg.lora_target_modules:
        adapted = [
            n for n, m in model.named_modules() if n.endswith(f".{name}") and hasattr(m, "lora_A")
        ]
        assert len(adapted) == text["num_hidden_layers"], name
        assert all(".language_model.layers." in n for n in adapted), name

    plan = plan_sft(cfg, num_processes=8, gpu_memory_gb=80, sharded=True, num_machines=2)
    assert (plan.facts["nodes"], plan.facts["processes_per_node"]) == (2, 4)  # 2 nodes x 4
    parts = {c.name: c for c in plan.components}
    assert parts["model (Qwen3VLForConditionalGeneration)"].parameters == pytest.approx(
        8.77e9, rel=0.01
    )
    assert parts["LoRA parameters"].parameters == _lora_parameters(text, r=32)
    assert plan.facts["image_tokens_per_image"] == 2_097_152 // (32 * 32)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "image_tokens"),
    [("paco_reward_7b_lora.yaml", 144), ("paco_reward_qwen3_vl_8b_lora.yaml", 121)],
)
def test_the_trainer_step_saves_what_the_plan_estimates(recipe, image_tokens):
    """The trainer's own step on a scaled evaluator of the recipe's architecture (two images
    at its pixel budget scaled down, the planned answer length, its LoRA, bf16 mixed
    precision): the bytes autograd holds for the backward are the planner's estimate for the
    same shape within 10 %, without gradient checkpointing and with it
    (benchmarks/sft_step.py, which prints this table)."""
    from benchmarks.sft_step import SFTStepArguments, saved_activations
    from paco_reward.training.planning import ANSWER_TOKENS

    off, on = saved_activations(
        SFTStepArguments(recipe=str(RECIPES / recipe), scale=0.0625, batch_size=2)
    )
    for row in (off, on):
        assert row["tokens"]["image"] == image_tokens and row["tokens"]["answer"] == ANSWER_TOKENS
        assert abs(row["error"]) < 0.10, row
    # what was measured: both decoder layers saved in the step without checkpointing; with
    # it the backward recomputed each, and the forward had kept a fraction
    assert {"0", "1"} <= set(off["measured_by_block"])
    assert set(on["held_at_recompute"]) == {"0", "1"}
    assert on["measured_bytes"] < off["measured_bytes"] / 2
